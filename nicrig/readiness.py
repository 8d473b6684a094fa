"""Whether a file or socket can be read without blocking.

select(2) refuses descriptors above 1023, which a GUI or a test process holding many files and sockets
reaches; a selector (epoll on Linux) has no such bound.
"""

from __future__ import annotations

import selectors
from typing import IO, Any


def readable(fileobj: int | IO[Any], timeout_s: float = 0.0) -> bool:
    """Whether ``fileobj`` (a descriptor or an object with ``fileno()``) has data or an end to read within
    ``timeout_s`` seconds (0: look without waiting)."""
    with selectors.DefaultSelector() as sel:
        sel.register(fileobj, selectors.EVENT_READ)
        return bool(sel.select(timeout_s))
