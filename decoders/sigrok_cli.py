"""Run a decoder stack on a capture-set source with the real libsigrokdecode, through sigrok-cli.

The source's packed samples are streamed to ``sigrok-cli -I binary -i -``
(sigrok's layout is nicrig's, so no conversion and no temporary file), the
stack's last decoder writes its ``records`` binary output (one JSON object a
line) to stdout. sigrok-cli exits 0 even when a decoder raised, so its
stderr is checked too.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import threading
from collections.abc import Callable
from functools import lru_cache
from typing import Any

from nicrig.acquisition.capture import Source
from nicrig.decoders import DECODERS_DIR, DecodeError, samplerate_for
from nicrig.decoders.spec import RECORDS, Stack

Progress = Callable[[int, int], None]
_FAILURE_MARKS = ("Traceback", "srd: ", "Protocol decoder instance", "No channel with name", "Failed to")


@lru_cache(maxsize=1)
def version() -> str:
    """``sigrok-cli 0.7.2 / libsigrokdecode 0.5.3`` as the installed sigrok-cli reports itself."""
    exe = shutil.which("sigrok-cli")
    if exe is None:
        raise DecodeError("sigrok-cli is not installed (Debian: apt-get install sigrok-cli)")
    out = subprocess.run([exe, "--version"], capture_output=True, text=True).stdout
    lines = out.splitlines()
    # "- libsigrokdecode 0.5.3/6:1:2 (rt: ...)."
    decode = next((ln.split()[2].split("/")[0] for ln in lines if ln.startswith("- libsigrokdecode ")), "?")
    return f"{lines[0].strip() if lines else 'sigrok-cli'} / libsigrokdecode {decode}"


def _command(source: Source, stack: Stack) -> list[str]:
    index = {name: str(i) for i, name in enumerate(source.channels)}
    calls = []
    for call in stack.calls:
        parts = [call.id] + [f"{k}={index[v]}" for k, v in call.channels.items()]
        parts += [f"{k}={v}" for k, v in call.options.items()]
        calls.append(":".join(parts))
    rate = samplerate_for(source)
    return ["sigrok-cli", "-I", f"binary:numchannels={len(source.channels)}:samplerate={rate}", "-i", "-",
            "-P", ",".join(calls), "-B", f"{stack.output}={RECORDS}"]


def run_stack(source: Source, stack: Stack, progress: Progress | None = None, *,
              start: int | None = None, stop: int | None = None) -> list[dict[str, Any]]:
    """Decode samples ``[start, stop)`` of ``source`` with ``stack``; return the last decoder's records in sample order.

    sigrok-cli numbers the samples it is fed from 0: the records' ``ss``/``es``
    are moved back to the source's numbering.
    """
    offset = max(0, start or 0)
    version()
    cmd = _command(source, stack)
    env = {**os.environ, "SIGROKDECODE_DIR": str(DECODERS_DIR)}
    proc = subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env)
    feed_error: list[BaseException] = []

    def feed() -> None:
        assert proc.stdin is not None
        try:
            for first, block in source.iter_packed(start, stop):
                proc.stdin.write(block.tobytes())
                if progress:
                    progress(first + len(block), source.num_samples)
        except BrokenPipeError:
            pass  # sigrok-cli stopped reading: its stderr says why
        except BaseException as exc:  # noqa: BLE001 - re-raised in the caller's thread below
            feed_error.append(exc)
        finally:
            proc.stdin.close()

    errors: list[bytes] = []
    drain = threading.Thread(target=lambda: errors.append(proc.stderr.read()), daemon=True)  # type: ignore[union-attr]
    writer = threading.Thread(target=feed, daemon=True)
    drain.start()
    writer.start()
    records = []
    assert proc.stdout is not None
    bad_line = None
    for line in proc.stdout:
        try:
            record = json.loads(line)
        except ValueError:
            bad_line = bad_line or line[:200]
            continue
        for key in ("ss", "es"):
            if isinstance(record.get(key), int):
                record[key] += offset
        records.append(record)
    proc.wait()
    writer.join()
    drain.join()
    if feed_error:
        raise feed_error[0]
    stderr = b"".join(errors).decode("utf-8", "replace")
    failed = [ln for ln in stderr.splitlines() if any(m in ln for m in _FAILURE_MARKS)]
    if proc.returncode != 0 or failed or bad_line is not None:
        detail = "; ".join(failed[-3:]) or (f"unreadable record {bad_line!r}" if bad_line else stderr.strip()[-300:])
        raise DecodeError(f"sigrok-cli failed decoding source {source.name!r} with {stack.text()}: {detail}")
    records.sort(key=lambda r: (r.get("ss", 0), r.get("es", 0)))
    return records
