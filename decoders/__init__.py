"""Custom sigrok protocol decoders, one folder each.

The folders below are real libsigrokdecode protocol decoders (API version 3):
point ``SIGROKDECODE_DIR`` at this folder, or run ``nicrig decoders install``,
and sigrok-cli and PulseView load them. They are not importable Python
modules outside libsigrokdecode.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from nicrig.errors import NicrigError

if TYPE_CHECKING:
    from nicrig.acquisition.capture import Source

DECODERS_DIR = Path(__file__).resolve().parent


class DecodeError(NicrigError):
    """A decode engine failed on a source."""


def samplerate_for(source: Source) -> int:
    """The integer sample rate (Hz) both engines give the decoders: sigrok-cli's binary input takes an integer."""
    return max(1, round(source.samplerate_hz or 1))
