"""The PCI bus renderer's C loops (acquisition/sim/_pci_render.c) give what their Python definitions give.

``gather`` reads the usual transactions in one walk and declines (None) anything else, which the Python path
then reads and reports: the renderer's flat columns are the same either way, and so are its errors.
``phases`` gives every data phase's clocks as the module doc of ``pci_bus`` defines them, transaction by
transaction here. ``paint`` writes the control lines per clock from asserted intervals, here against setting
each interval's clocks.
"""

from __future__ import annotations

import dataclasses
import sys

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from nicrig.acquisition.sim import _pci_render, pci_bus
from nicrig.acquisition.sim.pci_bus import TERMINATIONS, PciTransaction

#: Changes that make a transaction unusual (the C path declines it) or wrong (the Python path reports it).
SPOILERS = [
    ("target_waits", lambda t: list(t.data.astype(np.int64) * 0)),
    ("target_waits", lambda t: np.zeros(len(t.data), np.int32)),
    ("master_waits", lambda t: np.repeat(np.arange(len(t.data), dtype=np.int64), 2)[::2]),  # strided view
    ("master_waits", lambda t: np.full(len(t.data), -1, np.int64)),
    ("target_waits", lambda t: np.zeros(len(t.data) + 1, np.int64)),
    ("byte_enables", lambda t: t.byte_enables.astype(np.uint64)),
    ("byte_enables", lambda t: np.full(len(t.data), 0x100, np.int64)),
    ("byte_enables", lambda t: np.full(len(t.data), 0x3, np.uint8)),
    ("data", lambda t: t.data.astype(np.uint32)),
    ("data", lambda t: [int(d) for d in t.data]),
    ("data", lambda t: t.data.reshape(1, -1)),
    ("kind", lambda t: "dåta"),
    ("kind", lambda t: b"raw"),
    ("master", lambda t: "bridge"),
    ("termination", lambda t: "bogus"),
    ("address", lambda t: -4),
    ("address", lambda t: 2**64),
    ("start_clk", lambda t: -1),
    ("start_clk", lambda t: np.int64(t.start_clk)),
    ("wide", lambda t: 1),
    ("command", lambda t: 16),
    ("devsel", lambda t: 5),
    ("parity_error_phases", lambda t: (7,)),
    ("parity_error_phases", lambda t: [0]),
]


@st.composite
def transaction(draw, clk: int, width: int) -> PciTransaction:
    """A transaction the renderer's batch accepts, in one of the forms the rig model gives."""
    term = draw(st.sampled_from(TERMINATIONS))
    if term == "master_abort":
        devsel, command = 0, draw(st.sampled_from([0x1, 0x4, 0x6, 0x7, 0xC]))
    else:
        devsel, command = draw(st.integers(1, 4)), draw(st.sampled_from([0x2, 0x3, 0x6, 0x7, 0xA, 0xC, 0xE, 0xF]))
    memory = command in pci_bus.MEMORY_COMMANDS
    wide = width == 64 and memory and draw(st.booleans())
    n = draw(st.integers(0 if term == "target_abort" else 1, 5))
    lanes = 0xFF if wide else 0xF
    be = [lanes] * n if command == 0xF else draw(st.lists(st.integers(0, lanes), min_size=n, max_size=n))
    waits = st.lists(st.integers(0, 3), min_size=n, max_size=n).map(
        lambda w: np.array(w, draw(st.sampled_from([np.int64, np.uint8]))))
    done = 0 if term in ("retry", "master_abort") else n
    return PciTransaction(
        start_clk=clk,
        command=command,
        address=draw(st.sampled_from([0x1000, 0x2_0000_0008] if memory else [0x1000, 0x1006])),
        data=np.array(draw(st.lists(st.integers(0, 2**64 - 1), min_size=n, max_size=n)), np.uint64),
        byte_enables=np.array(be, draw(st.sampled_from([np.uint8, np.int64]))),
        target_waits=draw(st.one_of(st.none(), waits)),
        master_waits=draw(st.one_of(st.none(), waits)),
        devsel=devsel,
        termination=term,
        wide=wide,
        master=draw(st.sampled_from(["nic", "host"])),
        parity_error_phases=tuple(draw(st.lists(st.integers(0, done - 1), max_size=2, unique=True))) if done else (),
        kind=draw(st.sampled_from(["", "csr", "descriptor-fetch-longer"])),
    )


@st.composite
def transactions(draw, width: int) -> list[PciTransaction]:
    """A few transactions; in half the examples one of them spoiled (SPOILERS)."""
    txs, clk = [], draw(st.integers(0, 3))
    for _ in range(draw(st.integers(0, 6))):
        txs.append(draw(transaction(clk, width)))
        clk += draw(st.integers(0, 40))
    if txs and draw(st.booleans()):
        i = draw(st.integers(0, len(txs) - 1))
        field, spoil = draw(st.sampled_from(SPOILERS))
        txs[i] = dataclasses.replace(txs[i], **{field: spoil(txs[i])})
    return txs


def _batch_or_error(txs: list[PciTransaction], width: int) -> object:
    try:
        return dataclasses.astuple(pci_bus._batch(txs, width))
    except (ValueError, TypeError, OverflowError, UnicodeError) as e:
        return type(e), str(e)


@settings(max_examples=400, deadline=None)
@given(data=st.data(), width=st.sampled_from([32, 64]))
def test_gather_gives_the_columns_and_errors_of_the_python_path(data, width):
    txs = data.draw(transactions(width))
    fast = _batch_or_error(txs, width)
    with pytest.MonkeyPatch.context() as m:
        m.setattr(_pci_render, "gather", lambda *args: None)
        general = _batch_or_error(txs, width)
    if isinstance(general, tuple) and general and isinstance(general[0], type):
        assert fast == general
        return
    assert len(fast) == len(general)
    for name, a, b in zip((f.name for f in dataclasses.fields(pci_bus._Batch)), fast, general):
        assert a.dtype == b.dtype and a.shape == b.shape, name
        np.testing.assert_array_equal(a, b, err_msg=name)


def _model_like(n_txs: int) -> list[PciTransaction]:
    """Transactions as the rig model makes them: shared byte-enable and wait arrays, fresh data."""
    be = np.full(4, 0xFF, np.uint8)
    waits = np.array([2, 0, 1, 0], np.int64)
    return [PciTransaction(start_clk=10 + 12 * i, command=0x7, address=0x1000 + 64 * i,
                           data=np.arange(i, i + 4, dtype=np.uint64), byte_enables=be, target_waits=waits,
                           master_waits=None if i % 2 else waits, wide=True, master="nic", kind="rx-data")
            for i in range(n_txs)]


def test_gather_reads_the_models_transactions_and_declines_the_rest():
    txs = _model_like(300)
    got = _pci_render.gather(txs, TERMINATIONS, PciTransaction)
    assert got is not None
    columns, flags, kinds, data, be, tw, mw = got
    cols = np.frombuffer(columns, np.int64).reshape(10, 300)
    np.testing.assert_array_equal(cols[0], 10 + 12 * np.arange(300))
    np.testing.assert_array_equal(cols[5], 4)
    np.testing.assert_array_equal(cols[7:].T, [[32, 3, 0 if i % 2 else 3] for i in range(300)])
    assert np.frombuffer(kinds, "S16")[7] == b"rx-data"
    np.testing.assert_array_equal(np.frombuffer(mw, np.int64).reshape(300, 4)[1], 0)
    np.testing.assert_array_equal(np.frombuffer(tw, np.int64).reshape(300, 4)[1], [2, 0, 1, 0])
    for change in [{"target_waits": [0, 0, 0, 0]}, {"data": np.arange(4, dtype=np.int64)},
                   {"byte_enables": np.full(3, 0xFF, np.uint8)}, {"master": "bridge"}, {"kind": "dåta"},
                   {"address": -8}, {"start_clk": np.int64(7)}, {"termination": "bogus"},
                   {"master_waits": np.array([0, -1, 0, 0])}]:
        odd = list(txs)
        odd[150] = dataclasses.replace(odd[150], **change)
        assert _pci_render.gather(odd, TERMINATIONS, PciTransaction) is None, change


def test_the_renderer_reports_what_the_python_path_finds():
    odd = _model_like(3)
    odd[1] = dataclasses.replace(odd[1], target_waits=np.array([0, -2, 0, 0]))
    with pytest.raises(ValueError, match="transaction at clock 22: target_waits must not be negative"):
        pci_bus.PciRenderer(odd, width_bits=64, with_ad=False)


@pytest.mark.parametrize("length", [2**60, 2**62, 2**63 - 1])
def test_a_data_length_beyond_any_column_is_the_python_paths_error(length):
    """len(data) is whatever the data's class says: a total phase count whose columns' bytes pass 2**63 once
    overflowed into a negative size (SystemError from bytearray); gather declines it and the renderer reports."""

    class Liar(np.ndarray):
        def __len__(self):
            return length

    txs = [dataclasses.replace(t, data=t.data.view(Liar)) for t in _model_like(2)]
    assert _pci_render.gather(txs, TERMINATIONS, PciTransaction) is None
    with pytest.raises(ValueError, match="length differs from len"):
        pci_bus.PciRenderer(txs, width_bits=64, with_ad=False)


@st.composite
def signals(draw) -> list[tuple[np.ndarray, np.ndarray]]:
    """Up to 12 signals of sorted, disjoint [start, end) intervals, some touching, some empty-length."""
    out = []
    for _ in range(draw(st.integers(0, 12))):
        bounds = sorted(draw(st.lists(st.integers(-5, 80), max_size=12)))
        starts, ends = np.array(bounds[0::2][: len(bounds) // 2], np.int64), np.array(bounds[1::2], np.int64)
        out.append((starts, ends))
    return out


@settings(max_examples=400, deadline=None)
@given(sig=signals(), c0=st.integers(0, 60), n=st.integers(0, 40), first_bit=st.integers(0, 2),
       dtype=st.sampled_from([np.uint16, np.uint32, np.uint64]))
def test_paint_sets_each_signals_bit_on_its_asserted_clocks(sig, c0, n, first_bit, dtype):
    idle = ((1 << len(sig)) - 1) << first_bit
    out = np.full(n, 0xBEEF, dtype)
    _pci_render.paint(out, c0, first_bit, idle, sig)
    expected = np.zeros(n, np.uint64)
    for bit, (starts, ends) in enumerate(sig, start=first_bit):
        for s, e in zip(starts, ends):
            for clk in range(max(s, c0), min(e, c0 + n)):
                expected[clk - c0] |= np.uint64(1 << bit)
    np.testing.assert_array_equal(out, (expected ^ np.uint64(idle)).astype(dtype))


def test_paint_takes_intervals_and_clocks_anywhere_in_int64():
    """Intervals from far below the block and blocks near 2**63: start - c0 and c0 + n once overflowed (an interval
    from -2**63 painted nothing where it covered every clock; a block at 2**63 - 3, nothing at all)."""
    big = np.array([2**63 - 1], np.int64)
    cases = [(5, [-(2**63)], big, [1] * 8), (2**63 - 3, [0], big, [1, 1] + [0] * 6),
             (-(2**63), [-(2**63) + 1], big, [0] + [1] * 7), (-(2**63), [-(2**63)], [-(2**63) + 2], [1, 1] + [0] * 6)]
    for c0, starts, ends, want in cases:
        out = np.zeros(8, np.uint8)
        _pci_render.paint(out, c0, 0, 0, [(np.array(starts, np.int64), np.array(ends, np.int64))])
        assert out.tolist() == want, c0


@pytest.mark.skipif(sys.version_info < (3, 12), reason="a Python class exports a buffer (__buffer__) from 3.12 on")
def test_paint_keeps_its_signals_while_a_buffer_export_runs_python_code():
    """A starts array whose __buffer__ empties the signals list: paint once read the pair the list had just freed
    (ASan: SEGV; checked on 3.12.1); it paints from its own copy of the list."""
    signals = []

    class Starts:
        def __buffer__(self, flags):
            signals.clear()
            return memoryview(np.zeros(1, np.int64))

    signals.append((Starts(), np.array([5], np.int64)))
    out = np.zeros(8, np.uint8)
    _pci_render.paint(out, 0, 0, 0, signals)
    assert out.tolist() == [1] * 5 + [0] * 3


def test_paint_refuses_what_it_cannot_read():
    out = np.zeros(4, np.uint64)
    ok = (np.array([1], np.int64), np.array([2], np.int64))
    with pytest.raises(TypeError, match="starts must be a contiguous 1-D int64 array"):
        _pci_render.paint(out, 0, 0, 1, [(np.array([1], np.int32), ok[1])])
    with pytest.raises(ValueError, match="differ in length"):
        _pci_render.paint(out, 0, 0, 1, [(ok[0], np.array([2, 3], np.int64))])
    with pytest.raises(TypeError, match="out must be"):
        _pci_render.paint(np.zeros(4, np.int32), 0, 0, 1, [ok])
    with pytest.raises(ValueError, match="fit in 64 bits"):
        _pci_render.paint(out, 0, 60, 1, [ok] * 5)
    with pytest.raises(ValueError, match="fit in 8 bits"):
        _pci_render.paint(np.zeros(4, np.uint8), 0, 0, 0x1FF, [ok])


def _phase_clocks(b0: int, e0: int, tw: list[int], mw: list[int]) -> tuple[list[tuple[int, ...]], tuple[int, ...]]:
    """The module doc's clocks of one transaction: per phase (begin, IRDY#, TRDY#, completion); t0, i0 and
    the last phase's TRDY#, IRDY#, completion (0 without phases)."""
    rows, begin = [], b0
    for k, (t, m) in enumerate(zip(tw, mw)):
        irdy, trdy = begin + m, (e0 if k == 0 else begin) + t
        rows.append((begin, irdy, trdy, max(irdy, trdy)))
        begin = max(irdy, trdy) + 1
    if not rows:
        return rows, (e0, b0, e0, b0, 0)
    return rows, (rows[0][2], rows[0][1], rows[-1][2], rows[-1][1], rows[-1][3])


@settings(max_examples=300, deadline=None)
@given(txs=st.lists(st.tuples(st.integers(0, 10**12), st.integers(0, 4), st.integers(0, 1),
                              st.lists(st.tuples(st.integers(0, 20), st.integers(0, 20)), max_size=6)), max_size=8))
def test_phases_are_the_module_docs_clocks(txs):
    b0 = np.array([s + 1 for s, _, _, _ in txs], np.int64)
    e0 = np.array([max(s + devsel, s + 1 + rd) for s, devsel, rd, _ in txs], np.int64)
    n = np.array([len(w) for *_, w in txs], np.int64)
    tw = np.array([t for *_, w in txs for t, _ in w], np.int64)
    mw = np.array([m for *_, w in txs for _, m in w], np.int64)
    per_phase = [np.full(tw.size, -1, np.int64) for _ in range(4)]
    per_txn = [np.full(len(txs), -1, np.int64) for _ in range(5)]
    _pci_render.phases(b0, e0, n, tw, mw, *per_phase, *per_txn)
    rows, ends = [], []
    for i, (*_, w) in enumerate(txs):
        r, e = _phase_clocks(int(b0[i]), int(e0[i]), [t for t, _ in w], [m for _, m in w])
        rows += r
        ends.append(e)
    assert np.stack(per_phase, axis=1).tolist() == [list(r) for r in rows]
    assert np.stack(per_txn, axis=1).tolist() == [list(e) for e in ends]


def test_phases_refuses_arrays_that_do_not_fit():
    one, two = np.zeros(1, np.int64), np.zeros(2, np.int64)
    with pytest.raises(ValueError, match="do not match"):
        _pci_render.phases(one, one, np.array([3]), two, two, two, two, two, two, one, one, one, one, one)
    with pytest.raises(ValueError, match="do not match"):
        _pci_render.phases(one, one, np.array([-1]), two, two, two, two, two, two, one, one, one, one, one)
    with pytest.raises(TypeError, match="n must be a contiguous 1-D int64 array"):
        _pci_render.phases(one, one, np.array([2], np.int32), two, two, two, two, two, two, one, one, one, one, one)


@pytest.mark.parametrize("field", ["data", "byte_enables", "target_waits", "master_waits"])
@pytest.mark.parametrize("scalar", [np.uint8(15), np.array(15, np.int64), np.array(15, np.uint64)])
def test_a_zero_dimensional_phase_array_is_reported_not_read(field, scalar):
    """A NumPy scalar or 0-d array exports a buffer without strides (NULL): gather declines it (it once read
    strides[0] first and crashed) and the renderer reports the Python path's error."""
    odd = _model_like(3)
    odd[1] = dataclasses.replace(odd[1], data=np.zeros(1, np.uint64), byte_enables=np.full(1, 0xFF, np.uint8),
                                 target_waits=None, master_waits=None)
    odd[1] = dataclasses.replace(odd[1], **{field: scalar})
    assert _pci_render.gather(odd, TERMINATIONS, PciTransaction) is None
    with pytest.raises((ValueError, TypeError)):
        pci_bus.PciRenderer(odd, width_bits=64, with_ad=False)


def test_gather_reads_a_slot_directly_only_where_getattr_would():
    """A member descriptor of another class set on the class names an offset into that class's instances (here
    into a float's value: it crashed), and a __getattribute__ is not bypassed: gather answers as getattr."""

    class Other:
        __slots__ = ("x",)

    class Foreign(float):
        pass

    for name in pci_bus.PciTransaction.__dataclass_fields__:
        setattr(Foreign, name, Other.__dict__["x"])
    assert _pci_render.gather([Foreign(1.5)], TERMINATIONS, Foreign) is None

    class Shifted(PciTransaction):
        __slots__ = ()

        def __getattribute__(self, name):
            value = object.__getattribute__(self, name)
            return value + 100 if name == "start_clk" else value

    txs = [Shifted(**{f.name: getattr(t, f.name) for f in dataclasses.fields(t)}) for t in _model_like(3)]
    columns = _pci_render.gather(txs, TERMINATIONS, Shifted)[0]
    np.testing.assert_array_equal(np.frombuffer(columns, np.int64)[:3], [110, 122, 134])
