"""Decoding recorded ring-buffer sub-buffers with libtraceevent: sub-buffers built here byte by byte to the
kernel's layout (kernel/trace/ring_buffer.c: ``buffer_data_page`` = u64 time stamp, long commit, data; each
record a 32-bit header of type_len:5 and time_delta:27 then type_len x 4 bytes), with the kernel's own
header_page and event format texts. Runs without root: no tracefs is needed to decode.
"""

from __future__ import annotations

import json
import struct
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from nicrig.acquisition.hostprobe import events as hp
from nicrig.errors import FormatError

NICRIG = [sys.executable, "-m", "nicrig"]

#: ``events/header_page`` of a 64-bit kernel with 4 KiB pages.
HEADER_PAGE = ("\tfield: u64 timestamp;\toffset:0;\tsize:8;\tsigned:0;\n"
               "\tfield: local_t commit;\toffset:8;\tsize:8;\tsigned:1;\n"
               "\tfield: int overwrite;\toffset:8;\tsize:1;\tsigned:1;\n"
               "\tfield: char data;\toffset:16;\tsize:4080;\tsigned:0;\n")
EXIT_ID = 224
#: ``events/irq/irq_handler_exit/format`` as the kernel gives it.
EXIT_FORMAT = (f"name: irq_handler_exit\nID: {EXIT_ID}\nformat:\n"
               "\tfield:unsigned short common_type;\toffset:0;\tsize:2;\tsigned:0;\n"
               "\tfield:unsigned char common_flags;\toffset:2;\tsize:1;\tsigned:0;\n"
               "\tfield:unsigned char common_preempt_count;\toffset:3;\tsize:1;\tsigned:0;\n"
               "\tfield:int common_pid;\toffset:4;\tsize:4;\tsigned:1;\n\n"
               "\tfield:int irq;\toffset:8;\tsize:4;\tsigned:1;\n"
               "\tfield:int ret;\toffset:12;\tsize:4;\tsigned:1;\n\n"
               "print fmt: \"irq=%d ret=%s\", REC->irq, REC->ret ? \"handled\" : \"unhandled\"\n")
FORMATS = {"irq:irq_handler_exit": EXIT_FORMAT}


def _record(event_id: int, irq: int, delta: int = 10) -> bytes:
    """One 16-byte record (type_len 4) of an irq_handler_exit-shaped event, ``delta`` ns after the previous."""
    payload = struct.pack("<HBBiii", event_id, 0, 0, 1234, irq, 1)
    return struct.pack("<I", (delta << 5) | (len(payload) // 4)) + payload


def _page(records: list[bytes], size: int = 4096, stamp: int = 1_000_000, commit: int | None = None) -> bytes:
    data = b"".join(records)
    head = struct.pack("<Qq", stamp, len(data) if commit is None else commit)
    return (head + data).ljust(size, b"\0")


def _decode(pages: list[bytes], subbuf: int = 4096) -> tuple[np.ndarray, np.ndarray]:
    raw = np.frombuffer(b"".join(pages), np.uint8).reshape(len(pages), -1)
    events, _, losses, _ = hp.decode(raw, np.zeros(len(pages), np.int16), HEADER_PAGE, FORMATS, {}, subbuf)
    return events, losses


def test_an_unreadable_subbuffer_is_counted_as_a_loss() -> None:
    """A sub-buffer whose commit size runs past its end cannot be read: it is counted, never walked, and the
    good ones beside it still decode."""
    good = _page([_record(EXIT_ID, 7), _record(EXIT_ID, 8)])
    bad = _page([_record(EXIT_ID, 9)], commit=5000)
    events, losses = _decode([good, bad, _page([_record(EXIT_ID, 10)], stamp=2_000_000)])
    assert list(events["irq"]) == [7, 8, 10]
    assert losses["unreadable_subbuffers"].tolist() == [1] and losses["subbuffers"].tolist() == [2]
    trace = hp.HostTrace(host="h", events=events, event_names=["irq:irq_handler_exit"], losses=losses, clock="mono",
                         start_ns=0, end_ns=1)
    assert trace.unreadable_subbuffers == 1 and hp.describe(trace)["unreadable_subbuffers"] == 1


def test_subbuffers_of_the_recorded_size_decode() -> None:
    """8 KiB sub-buffers (buffer_subbuf_size_kb 8): every record of a page filled past 4 KiB is read."""
    records = [_record(EXIT_ID, i) for i in range(300)]  # 300 x 20 bytes: 6000 bytes of data
    events, losses = _decode([_page(records, size=8192)], subbuf=8192)
    assert list(events["irq"]) == list(range(300)) and losses["unreadable_subbuffers"].tolist() == [0]


@pytest.mark.parametrize("subbuf", [3000, 2048])
def test_a_subbuffer_size_that_does_not_fit_is_refused(subbuf: int) -> None:
    raw = np.zeros((1, subbuf), np.uint8)
    with pytest.raises(FormatError, match=f"sub-buffer size of {subbuf} bytes does not fit the trace's header_page"):
        hp.decode(raw, np.zeros(1, np.int16), HEADER_PAGE, FORMATS, {}, subbuf)


def test_rows_of_another_size_than_recorded_are_refused() -> None:
    with pytest.raises(FormatError, match="not rows of the trace's 8192 bytes"):
        _decode([_page([_record(EXIT_ID, 1)])], subbuf=8192)


def test_records_of_unknown_events_are_counted_and_shown(tmp_path: Path) -> None:
    """Records of an event id no stored format describes are kept as a count, in ``trace show`` and --json."""
    from nicrig.acquisition.capture import CaptureSet

    events, losses = _decode([_page([_record(EXIT_ID, 3), _record(999, 4), _record(998, 5)])])
    assert list(events["irq"]) == [3] and losses["unknown_records"].tolist() == [2]
    trace = hp.HostTrace(host="local", events=events, event_names=["irq:irq_handler_exit"], losses=losses,
                         clock="mono", start_ns=0, end_ns=1_000_000_000, hostname="box")
    out = tmp_path / "u.h5"
    with CaptureSet.create(out) as cs:
        hp.write(cs, trace)
    p = subprocess.run([*NICRIG, "trace", "show", str(out)], capture_output=True, text=True, timeout=60)
    assert p.returncode == 0, p.stderr
    assert "2 records of events without a format (not decoded)" in p.stdout.splitlines()[0]
    p = subprocess.run([*NICRIG, "trace", "show", str(out), "--json"], capture_output=True, text=True, timeout=60)
    assert json.loads(p.stdout)["hosts"][0]["unknown_records"] == 2



def test_a_file_written_before_the_two_new_loss_columns_reads_them_as_zero(tmp_path: Path) -> None:
    from nicrig.acquisition.capture import CaptureSet
    from nicrig.h5file import open_any

    before = np.dtype([(n, hp.LOSSES_DTYPE[n]) for n in hp.LOSSES_DTYPE.names
                       if n not in ("unreadable_subbuffers", "unknown_records")])
    losses = np.zeros(1, before)
    losses["dropped_events"] = 3
    trace = hp.HostTrace(host="local", events=np.zeros(0, hp.EVENT_DTYPE), event_names=[], losses=losses,
                         clock="mono", start_ns=0, end_ns=1)
    out = tmp_path / "before.h5"
    with CaptureSet.create(out) as cs:
        hp.write(cs, trace)
    with open_any(out) as f:
        back = hp.read(f, "local")
    assert back.losses.dtype == hp.LOSSES_DTYPE and back.lost == 3
    assert back.unreadable_subbuffers == 0 and back.unknown_records == 0
