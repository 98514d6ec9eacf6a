"""What a trace needs of many Publish frames at once (id, publisher, `type`, hops so
far, size), read from their msgpack bytes with numpy: no Python object per event.

The trace writer (`broker.trace.hop_writer`) gets each read's frames as the broker received
them and must find these fields again. Decoding each frame with msgpack and picking the
fields out in Python cost it ~2 us per event, more than a sixth of what the broker spends
routing the event; on a 2-core host that CPU is taken from the traced broker and its
clients. Here every step (read a header byte, skip a value) is one numpy operation over
all the events of a blob, which costs ~0.2 us per event.

The layout read is the one `broker.messages` writes and checks: a 4-byte length, then
``[20, event_id, publisher, attributes, path, t_publish_ns]`` with scalar attribute
values and string hops. Every frame is walked to its last byte, and anything else
(another message, a `type` that is not a string, a frame whose walk does not end at its
last byte) makes `publish_fields` return None: the caller then decodes the frames one
by one (`broker.messages.publish_summary`), which also names what is wrong.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pyarrow as pa

from broker.messages import Publish

_PUBLISH_HEAD = (0x96, Publish.TYPE)  # fixarray of 6, then the type code (a fixint)
_TYPE_KEY = np.frombuffer(b"\xa4type", np.uint8)  # the key "type" as a fixstr


def _sizes_table() -> tuple[np.ndarray, np.ndarray]:
    """By first byte: the size of a scalar msgpack value whose size that byte says (0:
    not such a value), and the width of the length that follows the byte for strings and
    binaries (their size is then 1 + width + the length)."""
    fixed = np.zeros(256, np.int64)
    fixed[0x00:0x80] = 1  # positive fixint
    fixed[0xE0:0x100] = 1  # negative fixint
    fixed[[0xC2, 0xC3]] = 1  # false, true
    fixed[[0xCC, 0xD0]] = 2  # 8-bit ints
    fixed[[0xCD, 0xD1]] = 3
    fixed[[0xCA, 0xCE, 0xD2]] = 5  # float32, 32-bit ints
    fixed[[0xCB, 0xCF, 0xD3]] = 9  # float64, 64-bit ints
    fixed[0xA0:0xC0] = 1 + np.arange(32)  # fixstr: its length is in the byte
    width = np.zeros(256, np.int64)
    width[[0xD9, 0xC4]] = 1  # str8, bin8
    width[[0xDA, 0xC5]] = 2
    width[[0xDB, 0xC6]] = 4
    return fixed, width


_FIXED, _WIDTH = _sizes_table()


class _Bytes:
    """A frame buffer with big-endian reads at many positions at once (positions past
    its end read as 0; the walk then fails its end check)."""

    def __init__(self, data: bytes | bytearray) -> None:
        self.raw = np.zeros(len(data) + 1, np.uint8)  # and a 0 after the last byte
        self.raw[:-1] = np.frombuffer(data, np.uint8)

    def byte(self, at: np.ndarray) -> np.ndarray:
        return np.take(self.raw, at, mode="clip").astype(np.int64)

    def uint(self, at: np.ndarray, width: np.ndarray) -> np.ndarray:
        """The unsigned big-endian ints of `width` bytes (0, 1, 2 or 4) at `at`."""
        value = np.zeros(len(at), np.int64)
        for k in range(int(width.max(initial=0))):
            more = width > k
            value = np.where(more, value * 256 + self.byte(at + k), value)
        return value

    def value_size(self, at: np.ndarray) -> np.ndarray:
        """The size of the scalar values at `at`; 0 where there is none."""
        first = self.byte(at)
        width = _WIDTH[first]
        return np.where(width > 0, 1 + width + self.uint(at + 1, width), _FIXED[first])

    def strings(self, at: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Where the text of the strings at `at` starts, its length, and whether there
        was a string at all."""
        first = self.byte(at)
        fix = (first >= 0xA0) & (first < 0xC0)
        width = np.where(
            fix, 0, np.select([first == 0xD9, first == 0xDA, first == 0xDB], [1, 2, 4])
        )
        is_str = fix | (width > 0)
        length = np.where(fix, first & 0x1F, self.uint(at + 1, width))
        return at + 1 + width, length, is_str

    def text(self, start: np.ndarray, length: np.ndarray) -> pa.Array:
        """A string column of the texts at `start`, `length` bytes each."""
        offsets = np.concatenate(([0], np.cumsum(length))).astype(np.int32)
        gather = np.repeat(start - offsets[:-1], length) + np.arange(offsets[-1])
        column = pa.StringArray.from_buffers(
            len(start), pa.py_buffer(offsets), pa.py_buffer(np.take(self.raw, gather, mode="clip"))
        )
        column.validate(full=True)  # UTF-8, as msgpack strings must be
        return column

    def container(self, at: np.ndarray, fix: int, sized: int) -> tuple[np.ndarray, np.ndarray]:
        """The item counts of the maps (`fix` 0x80, `sized` 0xDE) or arrays (0x90, 0xDC)
        at `at`, and their headers' sizes; counts of -1 where there is none."""
        first = self.byte(at)
        width = np.select([first == sized, first == sized + 1], [2, 4])
        small = (first & 0xF0) == fix  # the count is in the byte
        count = np.where(small, first & 0x0F, self.uint(at + 1, width))
        count = np.where(small | (width > 0), count, -1)
        return count, 1 + width


def publish_fields(data: bytes | bytearray, starts: np.ndarray) -> dict[str, Any] | None:
    """The columns `event_id`, `publisher`, `event_type` ("" without a `type`),
    `hops_before` and `bytes_in` of the Publish frames at `starts` in `data`; None
    when any frame there is not one (or has a `type` that is not a string)."""
    buf = _Bytes(data)
    starts = np.asarray(starts, np.int64)
    stops = starts + 4 + buf.uint(starts, np.full(len(starts), 4))
    at = starts + 4
    if not (
        np.all(buf.byte(at) == _PUBLISH_HEAD[0]) and np.all(buf.byte(at + 1) == _PUBLISH_HEAD[1])
    ):
        return None
    id_start, id_length, id_ok = buf.strings(at + 2)
    pub_start, pub_length, pub_ok = buf.strings(id_start + id_length)
    at = pub_start + pub_length
    entries, header = buf.container(at, 0x80, 0xDE)
    # (a count no frame has the bytes for would make the walk below take forever)
    if not (id_ok.all() and pub_ok.all() and (entries >= 0).all()):
        return None
    if np.any(2 * entries > stops - at):  # an entry takes 2 bytes at least
        return None
    at = at + header
    type_at = np.full(len(at), -1)
    for entry in range(int(entries.max(initial=0))):
        busy = np.flatnonzero(entries > entry)
        key = at[busy]
        key_size = buf.value_size(key)
        is_type = (key_size == 5) & np.all(
            buf.byte(key[:, None] + np.arange(5)) == _TYPE_KEY, axis=1
        )
        value = key + key_size
        value_size = buf.value_size(value)
        if not (np.all(key_size > 0) and np.all(value_size > 0)):
            return None
        type_at[busy[is_type]] = value[is_type]
        at[busy] = value + value_size
    hops, header = buf.container(at, 0x90, 0xDC)
    if not (hops >= 0).all() or np.any(hops > stops - at):
        return None
    at = at + header
    for hop in range(int(hops.max(initial=0))):
        busy = np.flatnonzero(hops > hop)
        _, _, is_str = buf.strings(at[busy])
        size = buf.value_size(at[busy])
        if not is_str.all():
            return None
        at[busy] += size
    at += buf.value_size(at)  # t_publish_ns
    if not np.array_equal(at, stops):
        return None
    typed = type_at >= 0
    type_start, type_length, type_ok = buf.strings(np.where(typed, type_at, 0))
    if not np.all(type_ok | ~typed):
        return None
    return {
        "event_id": buf.text(id_start, id_length),
        "publisher": buf.text(pub_start, pub_length),
        "event_type": buf.text(np.where(typed, type_start, 0), np.where(typed, type_length, 0)),
        "hops_before": hops.astype(np.int32),
        "bytes_in": (stops - starts).astype(np.int32),
    }
