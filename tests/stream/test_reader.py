"""app/stream/reader.py: one line framer, at every chunk boundary, and its two wrappers.

Plain parametrised tests (hypothesis is not a dependency): every split position of a few inputs
that hold the hard cases (CRLF, lone CR, empty lines, a long line, an unterminated tail).
"""

from __future__ import annotations

import asyncio
import hashlib
import io

import pytest

from app.stream.parser import parse_line
from app.stream.reader import CHUNK, MAX_LINE, LineFramer, aiter_line_batches, iter_lines

# (input bytes, the lines the framer gives for it)
CASES = {
    "plain": (b'{"type":"system"}\n{"type":"result"}\n', [b'{"type":"system"}', b'{"type":"result"}']),
    "crlf": (b"one\r\ntwo\r\n", [b"one", b"two"]),
    "mixed_endings": (b"a\r\nb\nc\r\n", [b"a", b"b", b"c"]),
    "lone_cr_inside": (b"a\rb\nold mac\r\r\n\rlead\n", [b"a\rb", b"old mac\r", b"\rlead"]),
    "empty_lines": (b"\n\na\n\n\r\nb\n", [b"", b"", b"a", b"", b"", b"b"]),
    "unterminated": (b"first\nsecond without newline", [b"first", b"second without newline"]),
    "unterminated_cr": (b"first\nends with cr\r", [b"first", b"ends with cr\r"]),
    "only_newline": (b"\n", [b""]),
    "long_line": (b"head\n" + b"x" * 300 + b"\r\ntail\n", [b"head", b"x" * 300, b"tail"]),
}


def frame(chunks: list[bytes], max_line: int | None = None) -> list[bytes]:
    framer = LineFramer(max_line)
    out: list[bytes] = []
    for chunk in chunks:
        out += framer.feed(chunk)
    return out + framer.finish()


def splits(data: bytes):
    """The input in two chunks at every offset, in three chunks around every offset, and 1-byte chunks."""
    for i in range(len(data) + 1):
        yield [data[:i], data[i:]]
        yield [data[:i], data[i:i + 2], data[i + 2:]]
    yield [data[i:i + 1] for i in range(len(data))]


@pytest.mark.parametrize("name", sorted(CASES))
def test_every_chunk_boundary_gives_the_same_lines(name):
    data, expected = CASES[name]
    assert frame([data]) == expected
    for chunks in splits(data):
        assert frame(chunks) == expected, [len(c) for c in chunks]


@pytest.mark.parametrize("name", sorted(CASES))
def test_a_cap_above_every_line_changes_nothing(name):
    data, expected = CASES[name]
    cap = max(len(line) for line in expected) or 1
    for chunks in splits(data):
        assert frame(chunks, cap) == expected


def test_empty_input_and_empty_chunks_give_nothing():
    assert frame([]) == []
    assert frame([b"", b"", b""]) == []
    framer = LineFramer()
    assert framer.feed(b"ab") == [] and framer.feed(b"") == [] and framer.feed(b"c\n") == [b"abc"]
    assert framer.finish() == [] and framer.finish() == []


def test_empty_lines_are_framed_and_the_parser_drops_them():
    lines = frame([b'{"type":"system"}\n\n\r\n{"type":"result"}\n'])
    assert lines == [b'{"type":"system"}', b"", b"", b'{"type":"result"}']
    assert [parse_line(line) is None for line in lines] == [False, True, True, False]


@pytest.mark.parametrize("cap", [1, 2, 3, 7, 64])
def test_cap_passes_a_long_line_on_in_pieces_nothing_lost(cap):
    content = bytes(b for b in range(256) if b not in b"\r\n")  # any other byte, NUL included
    line = (content * (3 * cap // len(content) + 1))[:3 * cap + 1]
    data = b"before\n" + line + b"\nafter\n"
    for chunks in [[data], *splits(data)]:
        out = frame(chunks, cap)
        assert all(0 < len(piece) <= cap for piece in out)
        assert b"".join(out) == b"before" + line + b"after"
        pieces = frame([line + b"\n"], cap)
        assert [len(p) for p in pieces] == [cap, cap, cap, 1]
        assert b"".join(pieces) == line


@pytest.mark.parametrize("cap", [1, 4, 5])
def test_cap_at_a_crlf_boundary_leaves_no_cr_and_no_empty_piece(cap):
    line = b"abcd" * 5
    data = line + b"\r\nnext\n"
    for chunks in splits(data):
        out = frame(chunks, cap)
        assert b"".join(out) == line + b"next"
        assert b"" not in out and all(len(p) <= cap for p in out)


def test_a_line_exactly_the_cap_is_one_piece():
    assert frame([b"abcd\n", b"efgh"], 4) == [b"abcd", b"efgh"]
    assert frame([b"ab", b"cd", b"\n"], 4) == [b"abcd"]
    assert frame([b"ab", b"cd", b"e\n"], 4) == [b"abcd", b"e"]


def test_pieces_come_out_as_soon_as_the_cap_is_passed():
    framer = LineFramer(4)
    assert framer.feed(b"abc") == []
    assert framer.feed(b"defghij") == [b"abcd", b"efgh"]  # "ij" stays buffered: the line goes on
    assert framer.feed(b"k\nl") == [b"ijk"]
    assert framer.finish() == [b"l"]


def test_no_cap_returns_any_line_whole():
    line = b"y" * (3 * 1024 * 1024 + 5)
    chunks = [line[i:i + 65536] for i in range(0, len(line), 65536)] + [b"\n"]
    assert frame(chunks) == [line]


def test_a_long_line_in_many_chunks_is_joined_once():
    """No quadratic re-joining: chunks without a newline are kept as they are until the line ends."""
    framer = LineFramer()
    chunks = [bytes([65 + i % 26]) * 100 for i in range(1000)]
    for chunk in chunks:
        assert framer.feed(chunk) == []
    assert framer._parts == chunks  # the same objects, not re-joined copies
    assert framer.feed(b"\n") == [b"".join(chunks)]


def test_invalid_cap_is_refused():
    for cap in (0, -1):
        with pytest.raises(ValueError, match="max_line"):
            LineFramer(cap)


# --- iter_lines (files) ----------------------------------------------------------------------

@pytest.mark.parametrize("chunk_size", [1, 2, 3, 5, 16, CHUNK])
def test_iter_lines_hashes_every_byte_and_frames_like_the_framer(chunk_size):
    data = b"".join(case[0] for case in CASES.values())
    expected = frame([data])
    digest = hashlib.sha256()
    assert list(iter_lines(io.BytesIO(data), digest, chunk_size=chunk_size)) == expected
    assert digest.hexdigest() == hashlib.sha256(data).hexdigest()  # CRs and newlines included
    assert list(iter_lines(io.BytesIO(data), chunk_size=chunk_size)) == expected


def test_iter_lines_has_no_cap():
    line = b"z" * (2 * CHUNK + 3)
    assert list(iter_lines(io.BytesIO(line + b"\r\n" + line), chunk_size=CHUNK)) == [line, line]


# --- aiter_line_batches (a child's stdout) ---------------------------------------------------

async def _collect(feeds: list[bytes], **kwargs) -> list[list[bytes]]:
    reader = asyncio.StreamReader()
    for data in feeds:
        reader.feed_data(data)
    reader.feed_eof()
    return [batch async for batch in aiter_line_batches(reader, **kwargs)]


async def test_async_batches_over_a_real_stream_reader():
    data = b"".join(case[0] for case in CASES.values())
    expected = frame([data])
    for chunk_size in (1, 3, 7, 1024, CHUNK):
        batches = await _collect([data], chunk_size=chunk_size)
        assert all(batches)  # never an empty batch
        assert [line for batch in batches for line in batch] == expected
    assert await _collect([data]) == [expected]  # one read: one batch
    assert await _collect([b"a\nb\nunterminated"]) == [[b"a", b"b"], [b"unterminated"]]  # the tail at EOF


async def test_async_batch_per_read_as_lines_complete():
    reader = asyncio.StreamReader()
    gen = aiter_line_batches(reader)
    reader.feed_data(b"one\r\ntwo\nthr")
    assert await gen.__anext__() == [b"one", b"two"]
    reader.feed_data(b"ee\n")
    assert await gen.__anext__() == [b"three"]
    reader.feed_data(b"partial")
    reader.feed_eof()
    assert await gen.__anext__() == [b"partial"]
    with pytest.raises(StopAsyncIteration):
        await gen.__anext__()


async def test_async_cap_passes_pieces_and_loses_nothing():
    cap = 16
    line = bytes(range(48, 48 + 49))  # 3 * cap + 1 bytes
    batches = await _collect([b"a\n", line, b"\r\nb\n"], chunk_size=5, max_line=cap)
    out = [piece for batch in batches for piece in batch]
    assert out[0] == b"a" and out[-1] == b"b"
    assert [len(p) for p in out[1:-1]] == [cap, cap, cap, 1]
    assert b"".join(out[1:-1]) == line


async def test_async_default_cap_is_far_above_real_lines():
    assert MAX_LINE >= 64 * 1024 * 1024
    line = b"q" * (20 * 1024 * 1024)  # the CLI prints single lines above 16 MiB
    batches = await _collect([line + b"\n"])
    assert [piece for batch in batches for piece in batch] == [line]
