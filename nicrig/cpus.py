"""How many CPUs this process may run on: the default number of workers of the commands that use several."""

from __future__ import annotations

import os


def usable_cpus() -> int:
    """CPUs in this process's affinity mask (what ``taskset`` or a container's cpuset allows), else all."""
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
