"""Lines of an imported text file, each bounded in length, with their line numbers.

A text importer that reads with ``for line in open(...)`` lets one line of a
hostile or damaged file (gigabytes without a newline) fill memory. :func:`lines`
reads through :func:`~nicrig.acquisition.limits.bounded_lines`, which refuses a line longer than
:data:`~nicrig.acquisition.limits.MAX_LINE_BYTES` with an error naming the file
and the line, so memory stays bounded whatever the file holds.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path

from nicrig.acquisition import limits

from nicrig.errors import FormatError

READ_BYTES = 1 << 20
Progress = Callable[[int, int], None]


def lines(path: Path, *, max_bytes: int = limits.MAX_LINE_BYTES, progress: Progress | None = None
          ) -> Iterator[tuple[int, str]]:
    """``(line number from 1, text without its end of line)`` for each line of ``path``, as UTF-8.

    A byte-order mark at the start is dropped; ``\\r\\n`` and ``\\n`` both end a line.
    A line over ``max_bytes`` bytes, or one that is not UTF-8, is a FormatError with
    its line number. ``progress(bytes_read, size)`` is called every few MB.
    """
    try:
        f = open(path, "rb")
        size = path.stat().st_size
    except OSError as exc:
        raise FormatError(f"{path}: cannot read: {exc.strerror or exc}") from None
    with f:
        if f.peek(3).startswith(b"\xef\xbb\xbf"):
            f.read(3)
        done, report = 0, READ_BYTES
        for lineno, raw in limits.bounded_lines(f, path, "a text listing", max_bytes=max_bytes):
            yield lineno, _text(path, lineno, raw)
            done += len(raw)
            if progress is not None and done >= report:
                progress(done, size)
                report = done + READ_BYTES
        if progress is not None:
            progress(done, size)


def _text(path: Path, lineno: int, raw: bytes) -> str:
    try:
        return raw.decode("utf-8").rstrip("\r")
    except UnicodeDecodeError as exc:
        raise FormatError(f"{path}:{lineno}: not UTF-8 text ({exc.reason} at byte {exc.start} of the line)") from None
