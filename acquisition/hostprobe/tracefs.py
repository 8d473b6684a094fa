"""The kernel's tracefs: where it is, who may use it, and nicrig's own tracing instances in it.

nicrig never touches the global tracer: every recording runs in a tracefs
*instance* of its own, ``instances/nicrig-<pid>`` (a separate ring buffer,
clock, event set and filters; Documentation/trace/ftrace.rst, "Instances"),
named after the process that owns it. Removing the directory restores
everything. An instance whose owner is dead (the owner was killed with
SIGKILL before its guardian could act, or the machine lost power mid-run) is
swept away by the next recording (:func:`sweep_stale`).
"""

from __future__ import annotations

import errno
import os
import re
import subprocess
import time
from pathlib import Path

from nicrig.errors import NicrigError

#: Where tracefs is, in the order the kernel documents (debugfs keeps a compatibility link).
MOUNTS = (Path("/sys/kernel/tracing"), Path("/sys/kernel/debug/tracing"))
INSTANCE_PREFIX = "nicrig-"
_INSTANCE = re.compile(rf"^{INSTANCE_PREFIX}(\d+)$")


class TracingNotPermitted(NicrigError):
    """This user may not trace the kernel, or the kernel has no tracefs."""


def root(mount: bool = True) -> Path:
    """The tracefs mount point; mounted here when it is not yet and we may (root).

    Raises :class:`TracingNotPermitted` (exit 2) with what to do when tracing is impossible for this user.
    """
    for candidate in MOUNTS:
        try:
            present = (candidate / "trace_clock").exists()
        except PermissionError:
            raise TracingNotPermitted(f"kernel tracing needs root: {candidate} is not readable by this user "
                                      f"(uid {os.geteuid()}); run the command as root") from None
        if present:
            return _check_access(candidate)
    if os.geteuid() != 0:
        raise TracingNotPermitted(
            "kernel tracing needs root: tracefs is not readable by this user "
            "(run as root, or mount tracefs and grant access to /sys/kernel/tracing)")
    if mount and MOUNTS[0].is_dir():
        subprocess.run(["mount", "-t", "tracefs", "nodev", str(MOUNTS[0])], check=False,
                       stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        if (MOUNTS[0] / "trace_clock").exists():
            return _check_access(MOUNTS[0])
    raise TracingNotPermitted("this kernel has no tracefs (CONFIG_TRACING off, or /sys/kernel/tracing missing)")


def _check_access(path: Path) -> Path:
    if not os.access(path / "instances", os.W_OK) or not os.access(path / "trace_clock", os.R_OK):
        raise TracingNotPermitted(
            f"kernel tracing needs root: {path}/instances is not writable by this user "
            f"(uid {os.geteuid()}); run the command as root")
    return path


def pid_alive(pid: int) -> bool:
    """True while process ``pid`` exists (a zombie counts as gone: it holds no files)."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return False
    return state not in ("Z", "X")


def remove_instance(path: Path, attempts: int = 50) -> None:
    """Stop and remove an instance; retries while a reader still holds one of its files (EBUSY)."""
    if not path.exists():
        return
    try:
        (path / "tracing_on").write_text("0")
    except OSError:
        pass
    for _ in range(attempts):
        try:
            path.rmdir()
            return
        except FileNotFoundError:
            return
        except OSError as exc:
            if exc.errno != errno.EBUSY:
                raise
            time.sleep(0.02)
    path.rmdir()


def stale_instances(base: Path) -> list[str]:
    """Names of the nicrig instances whose owning process is gone (each is named for its owner's pid)."""
    return [name for name in nicrig_instances(base) if not pid_alive(int(_INSTANCE.match(name)[1]))]


def sweep_stale(base: Path) -> list[str]:
    """Remove nicrig instances whose owning process is gone; returns their names."""
    removed = stale_instances(base)
    for name in removed:
        remove_instance(base / "instances" / name)
    return removed


def nicrig_instances(base: Path) -> list[str]:
    """Names of the nicrig instances tracefs holds now."""
    instances = base / "instances"
    return sorted(e.name for e in instances.iterdir() if _INSTANCE.match(e.name)) if instances.is_dir() else []


def available_events(base: Path) -> set[str]:
    """Every ``system:event`` this kernel can trace."""
    return set((base / "available_events").read_text().split())
