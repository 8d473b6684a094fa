"""udpmon/payload.py's UniformBytes draws what ``Generator.integers(0, 256, size=n, dtype=np.uint8)`` draws,
which it replaced in the simulated rig for speed, and leaves the generator where that
would have."""

from __future__ import annotations

import numpy as np
from hypothesis import example, given, settings
from hypothesis import strategies as st
from nicrig.udpmon.payload import HEADER_BYTES, Kind, UniformBytes, header_seq, make_payload, parse_header


def _same_state(a: np.random.Generator, b: np.random.Generator) -> bool:
    """The two generators draw alike from here on: the same PCG64 state, and the same 32-bit output kept if
    one is (``uinteger`` is a leftover, and may differ, when ``has_uint32`` is 0)."""
    sa, sb = a.bit_generator.state, b.bit_generator.state
    return (sa["state"] == sb["state"] and sa["has_uint32"] == sb["has_uint32"]
            and (not sa["has_uint32"] or sa["uinteger"] == sb["uinteger"]))


@settings(max_examples=300, deadline=None)
@given(seed=st.integers(0, 2**32), before=st.integers(0, 5),
       sizes=st.lists(st.one_of(st.integers(0, 12), st.integers(13, 9000)), max_size=12))
@example(seed=1, before=3, sizes=[1400, 1400, 900, 1, 2, 3, 4, 5])
def test_the_bytes_and_the_generator_after_are_those_of_integers(seed, before, sizes):
    """Any sizes in turn (every remainder modulo 8 bytes, none), after draws that leave a 32-bit output kept
    or not (``integers`` below 2**30, as the rig's clock phases)."""
    ours, theirs = np.random.default_rng(seed), np.random.default_rng(seed)
    for rng in (ours, theirs):
        rng.integers(0, 1 << 30, size=before)
    fill = UniformBytes(ours)
    for n in sizes:
        assert fill(n) == theirs.integers(0, 256, size=n, dtype=np.uint8).tobytes()
        assert _same_state(ours, theirs)
    assert ours.integers(0, 2**63, size=3).tolist() == theirs.integers(0, 2**63, size=3).tolist()


def test_other_bit_generators_draw_through_integers_and_payloads_are_alike():
    """MT19937 makes 32-bit outputs of its own (PCG64 halves 64-bit ones): the bytes are ``integers``' too;
    make_payload takes either."""
    ours, theirs = np.random.Generator(np.random.MT19937(7)), np.random.Generator(np.random.MT19937(7))
    fill = UniformBytes(ours)
    assert fill(1001) == theirs.integers(0, 256, size=1001, dtype=np.uint8).tobytes()
    assert make_payload(1400, Kind.STREAM, 5, 9, UniformBytes(np.random.default_rng(3))) == \
        make_payload(1400, Kind.STREAM, 5, 9, np.random.default_rng(3))


def test_a_payloads_seq_is_its_headers_or_minus_one_without_one():
    """``header_seq`` is ``parse_header``'s ``seq``; -1 for a payload too short for the header or without its
    magic."""
    fill = UniformBytes(np.random.default_rng(5))
    for n, seq in ((HEADER_BYTES, 7), (1400, 2**32 - 1), (18, 0)):
        payload = make_payload(n, Kind.STREAM, seq, 9, fill)
        assert header_seq(payload) == parse_header(payload).seq == seq
    short = make_payload(HEADER_BYTES - 1, Kind.STREAM, 3, 9, fill)
    assert header_seq(short) == -1 and parse_header(short) is None
    no_magic = b"\0" * 4 + make_payload(100, Kind.STREAM, 3, 9, fill)[4:]
    assert header_seq(no_magic) == -1 and parse_header(no_magic) is None
