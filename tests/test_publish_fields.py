"""The trace writer's bulk reading of Publish frames (`broker.publish_fields`) against
decoding each frame with msgpack (`broker.messages.publish_summary`)."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from broker.messages import Ping, Publish, publish_summary
from broker.protocol import ProtocolError, encode_frame, frame_starts
from broker.publish_fields import publish_fields
from broker.trace.hop_writer import own_fields

texts = st.text(max_size=300)
scalars = st.one_of(
    st.integers(-(2**63), 2**64 - 1),
    st.floats(allow_nan=False),
    st.booleans(),
    st.text(max_size=300),
    st.binary(max_size=70_000),
)


@st.composite
def events(draw: Any) -> Publish:
    keys = st.text(max_size=40).filter(lambda key: key != "type")
    attributes = draw(st.dictionaries(keys, scalars, max_size=6))
    if draw(st.booleans()):  # a `type`, at some place among the others
        items = list(attributes.items())
        items.insert(draw(st.integers(0, len(items))), ("type", draw(texts)))
        attributes = dict(items)
    return Publish(
        draw(texts),
        draw(texts),
        attributes,
        draw(st.lists(st.text(max_size=40), max_size=20)),
        draw(st.integers(0, 2**63 - 1)),
    )


def decoded(frames: bytes) -> list[tuple[str, str, Any, int, int]]:
    """What decoding each frame says: id, publisher, type, hops, frame size."""
    bounds = [*frame_starts(frames), len(frames)]
    out = []
    for start, stop in zip(bounds, bounds[1:], strict=False):
        out.append((*publish_summary(frames[start + 4 : stop]), stop - start))
    return out


def read_in_bulk(frames: bytes, starts: list[int]) -> list[tuple[str, str, Any, int, int]] | None:
    fields = publish_fields(frames, np.array(starts, np.int64))
    if fields is None:
        return None
    names = ("event_id", "publisher", "event_type", "hops_before", "bytes_in")
    columns = [list(fields[name]) for name in names]
    return [
        (str(i), str(p), str(t), int(h), int(b)) for i, p, t, h, b in zip(*columns, strict=True)
    ]


LARGE = Publish(  # strings and binaries whose lengths take 2 and 4 bytes
    "e" * 300,
    "p" * 70_000,
    {"a": b"x" * 70_000, "type": "t" * 300, "b": -(2**63), "c": 2**64 - 1, "d": 0.5},
    ["1"] * 70,
    2**63 - 1,
)


@settings(max_examples=200, deadline=None)
@given(st.lists(events(), max_size=12))
@example([LARGE, Publish("e", "p", {}, [], 0)])
def test_bulk_reading_says_what_decoding_says(batch: list[Publish]) -> None:
    frames = b"".join(encode_frame(event, max_frame=1 << 24) for event in batch)
    assert read_in_bulk(frames, frame_starts(frames)) == decoded(frames)


def test_only_the_frames_asked_for_are_read() -> None:
    ping = encode_frame(Ping(3))
    event = encode_frame(Publish("e1", "p", {"type": "t", "n": 1}, ["1", "2"], 5))
    frames = ping + event + ping
    assert read_in_bulk(frames, [len(ping)]) == [("e1", "p", "t", 2, len(event))]


@pytest.mark.parametrize(
    ("frames", "why"),
    [
        (encode_frame(Ping(3)), "another message"),
        (encode_frame(Publish("e1", "p", {"type": 7}, [], 5)), "a type that is not a string"),
        (
            (lambda f: f[:3] + bytes([f[3] + 1]) + f[4:] + b"\xc0")(
                encode_frame(Publish("e1", "p", {"a": 1}, [], 5))
            ),
            "a frame longer than its message",
        ),
        (
            # without the count check, the walk would read past the end for ever
            b"\x00\x00\x00\x0e\x96\x14\xa2e1\xa1p\xdf\xff\xff\xff\xff\x01\x01",
            "a map claiming more entries than the frame has bytes",
        ),
        (
            encode_frame(Publish("e1", "p", {}, ["1"], 5)).replace(
                b"\x91\xa11", b"\xdd\xff\xff\xff\xff\xa11"
            ),
            "a path claiming more hops than the frame has bytes",
        ),
    ],
)
def test_what_the_bulk_reading_does_not_take(frames: bytes, why: str) -> None:
    assert read_in_bulk(frames, [0]) is None, why


def test_the_writer_decodes_what_the_bulk_reading_does_not_take() -> None:
    frames = encode_frame(Publish("e1", "p", {"type": 7}, ["1"], 5)) + encode_frame(
        Publish("e2", "p", {"type": "t"}, [], 5)
    )
    fields = own_fields(frames, 2, [0, 1])
    assert fields["event_type"].to_pylist() == ["7", "t"]
    assert fields["event_id"].to_pylist() == ["e1", "e2"]
    assert list(fields["hops_before"]) == [1, 0]
    with pytest.raises(ValueError, match="event 0 of a blob: not a Publish"):
        own_fields(encode_frame(Ping(1)), 1, [0])
    with pytest.raises(ValueError, match="the reads have 3 messages but 2 frames"):
        own_fields(frames, 3, [0, 1])


@pytest.mark.parametrize(
    ("data", "error"),
    [
        (encode_frame(Ping(1)) + b"\x00\x00", "2 bytes left over after the frames"),
        (encode_frame(Ping(1))[:-1], "last frame truncated"),
    ],
)
def test_frame_starts_names_a_cut_frame(data: bytes, error: str) -> None:
    with pytest.raises(ProtocolError, match=error):
        frame_starts(data)
