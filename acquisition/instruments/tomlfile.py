"""Reading the TOML files of instrument setups: probe maps, rig configurations, deskew calibrations."""

from __future__ import annotations

import tomllib
from pathlib import Path
from typing import Any

from nicrig.errors import UsageError


def read_toml(path: str | Path, what: str) -> dict[str, Any]:
    """The parsed file; a missing or malformed one is a :class:`UsageError` naming ``what`` it should be."""
    p = Path(path)
    try:
        return tomllib.loads(p.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise UsageError(f"{what} {p} does not exist") from None
    except IsADirectoryError:
        raise UsageError(f"{what} {p} is a folder, not a file") from None
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as exc:
        raise UsageError(f"{p}: not valid TOML: {exc}") from None
