"""The GUI process's start-up objects kept out of the cyclic garbage collector's way.

Once the window's modules are imported the process holds ~120 k tracked objects (modules, functions,
types, Qt's wrappers) and, PySide6's feature check having read the source of every module imported after it
(``inspect.getsource``), ~460 k lines of source in ``linecache``. CPython's full collection walks all of
them: 70-140 ms on a 2-core machine, and a redraw it lands in misses several frames. Frozen then
(``gc.freeze``), at the end of ``nicrig.gui.app``'s import, they are passed by: a full collection walks
the windows' own objects, ~1,600 for a capture with every decoded lane (1-2 ms). Nothing a window makes
is frozen, the window itself included (a freeze in its ``__init__`` caught its wrapper, made before:
a closed window and its capture's arrays then stayed resident), so closed windows are freed as before.
"""

from __future__ import annotations

import gc
import linecache

_frozen = False


def freeze_start_up() -> None:
    """Freeze what the process holds now, once per process (later calls do nothing), and forget the source
    lines read for PySide6's feature check (a traceback reads them again)."""
    global _frozen
    if not _frozen:
        _frozen = True
        linecache.clearcache()
        gc.freeze()
