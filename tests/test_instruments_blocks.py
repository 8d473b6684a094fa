"""IEEE 488.2 definite-length blocks: headers (decimal and Tektronix's hex digit count), streaming, damage."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st
from nicrig.acquisition.instruments.blocks import (
    BlockError,
    TransportError,
    TruncatedBlock,
    encode_block,
    parse_header,
    read_block,
)


def reader(stream: bytes, *, fail_after: int | None = None, most: int = 1000):
    """read(n) over ``stream``, at most ``most`` bytes a call; TransportError once dry (or after ``fail_after``)."""
    pos = 0
    limit = len(stream) if fail_after is None else fail_after

    def read(n: int) -> bytes:
        nonlocal pos
        if pos >= limit:
            raise TransportError("no data within the timeout")
        out = stream[pos:min(pos + n, pos + most, limit)]
        pos += len(out)
        return out
    return read


def collect(stream: bytes, **kw) -> tuple[int, bytes]:
    got = bytearray()
    fail_after = kw.pop("fail_after", None)
    n = read_block(reader(stream, fail_after=fail_after), got.extend, **kw)
    return n, bytes(got)


@given(st.binary(max_size=5000), st.booleans(), st.integers(1, 700), st.integers(1, 300))
def test_any_data_round_trips_in_any_chunking(data, hex_count, chunk, most):
    # newlines and '#' inside the data must not matter: blocks are read by count, not by line
    got = bytearray()
    n = read_block(reader(encode_block(data, hex_count) + b"\n", most=most), got.extend, hex_count=hex_count,
                   chunk_bytes=chunk)
    assert (n, bytes(got)) == (len(data), data)


def test_header_forms():
    assert parse_header(b"#3500") == (5, 500)
    assert parse_header(b"#9000001000xyz") == (11, 1000)        # Rigol's fixed #9
    assert parse_header(b"#A0000001234", hex_count=True) == (12, 1234)  # Tektronix: 10 digits
    assert encode_block(b"ab", digits=9) == b"#9000000002ab"


@pytest.mark.parametrize("head, hex_count, message", [
    (b"#A0000001234", False, "digit count 'A' is not 1-9"),
    (b"#0abc\n", False, "indefinite-length block"),
    (b"1.2,3.4\n", False, "not a definite-length block"),
    (b"#3x0000", False, "not decimal digits"),
    (b"#5123", False, "cut short"),
])
def test_bad_headers_are_named(head, hex_count, message):
    with pytest.raises(BlockError, match=message):
        parse_header(head, hex_count=hex_count)


def test_garbage_instead_of_a_block():
    with pytest.raises(BlockError, match="not a definite-length block: the answer starts"):
        collect(b"\x15\xfe garbage\n")


def test_a_block_cut_short_keeps_what_arrived():
    block = encode_block(bytes(range(200)) * 5) + b"\n"
    got = bytearray()
    with pytest.raises(TruncatedBlock, match="600 of 1,000 bytes") as info:
        read_block(reader(block, fail_after=6 + 600), got.extend, chunk_bytes=64)
    assert (info.value.received, info.value.expected) == (600, 1000)
    assert bytes(got) == block[6:606]


def test_a_truncated_block_does_not_store_its_terminator_as_data():
    # the instrument announced 1000 bytes but sent 500 and its newline, then nothing
    stream = b"#41000" + b"\x01" * 500 + b"\n"
    got = bytearray()
    with pytest.raises(TruncatedBlock, match="500 of 1,000") as info:
        read_block(reader(stream), got.extend)
    assert info.value.received == 500 and bytes(got) == b"\x01" * 500


def test_more_data_than_announced_is_an_error():
    with pytest.raises(BlockError, match="more data than its header announced"):
        collect(b"#13abcdef\n")


def test_no_header_at_all():
    with pytest.raises(TruncatedBlock, match="no block header arrived"):
        collect(b"")
