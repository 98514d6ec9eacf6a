"""The frames built per event without building messages: a client's new event
(`broker.protocol.new_event_frame`), and a broker's forwarded Publish
(`forwarded_frame`) and Deliver spliced from it (`deliver_frame`) are byte for byte
the messages encoded on their own, and are checked as such; a forwarded Publish
spliced from the payload the broker received (`RoutedFrames.publish_received`)
decodes to the same message, and the Deliver spliced straight from that payload
(`RoutedFrames.deliver_received`) is the one spliced from the forwarded frame."""

from __future__ import annotations

import contextlib

import msgpack
import pytest
from hypothesis import given
from hypothesis import strategies as st

from broker.messages import PUBLISH_HEAD, publish_array
from broker.protocol import (
    PROTOCOL_VERSION,
    Bye,
    Connection,
    Deliver,
    Hello,
    ProtocolError,
    Publish,
    RoutedFrames,
    Subscribe,
    Welcome,
    decode_message,
    deliver_frame,
    encode_frame,
    forwarded_frame,
    new_event_frame,
)
from tests.strategies import events

sub_id_lists = st.lists(st.integers(min_value=0, max_value=2**64 - 1), min_size=1, max_size=40)


@given(
    attributes=events,
    path=st.lists(st.text(max_size=5), max_size=20),
    sub_ids=sub_id_lists,
    t_ns=st.integers(min_value=0, max_value=2**63 - 1),
)
def test_the_spliced_deliver_is_the_encoded_one(
    attributes: dict, path: list[str], sub_ids: list[int], t_ns: int
) -> None:
    event = Publish("pub:1", "pub", attributes, path, t_ns)
    assert deliver_frame(encode_frame(event), sub_ids) == encode_frame(event.to_deliver(sub_ids))


@given(
    attributes=events,
    event_id=st.text(max_size=8),
    publisher=st.text(max_size=8),
    t_ns=st.integers(min_value=-(2**63), max_value=2**64 - 1),
)
def test_the_new_event_frame_is_the_encoded_one(
    attributes: dict, event_id: str, publisher: str, t_ns: int
) -> None:
    event = Publish(event_id, publisher, attributes, [], t_ns)
    assert new_event_frame(event_id, publisher, attributes, t_ns) == encode_frame(event)


@pytest.mark.parametrize(
    ("fields", "text"),
    [
        ((1, "p", 5), "Publish.event_id: expected str, got int"),
        (("e", None, 5), "Publish.publisher: expected str, got None"),
        (("e", "p", 5.0), "Publish.t_publish_ns: expected int, got float"),
        (("e", "p", True), "Publish.t_publish_ns: expected int, got bool"),
        (("e", "p", 2**64), "Publish.t_publish_ns: .* does not fit"),
    ],
)
def test_a_new_event_with_bad_fields_is_refused_by_name(
    fields: tuple[object, object, object], text: str
) -> None:
    event_id, publisher, t_ns = fields
    with pytest.raises(ProtocolError, match=text):
        new_event_frame(event_id, publisher, {"n": 1}, t_ns)  # type: ignore[arg-type]
    size = len(new_event_frame("e", "p", {"n": 1}, 5)) - 4
    with pytest.raises(ProtocolError, match=f"Publish needs {size} bytes, over the maximum"):
        new_event_frame("e", "p", {"n": 1}, 5, max_frame=size - 1)


@given(
    attributes=events,
    path=st.lists(st.text(max_size=5), max_size=20),
    hop=st.text(max_size=8),
    sub_ids=sub_id_lists,
)
def test_the_forwarded_frame_is_the_encoded_one(
    attributes: dict, path: list[str], hop: str, sub_ids: list[int]
) -> None:
    event = Publish("pub:1", "pub", attributes, path, 7)
    frame = forwarded_frame(event, hop)
    assert frame == encode_frame(event.with_hop(hop))
    assert deliver_frame(frame, sub_ids) == encode_frame(event.with_hop(hop).to_deliver(sub_ids))


def test_a_bad_hop_or_a_forwarded_event_too_large_is_refused_by_name() -> None:
    event = Publish("e", "p", {"n": 1}, [], 5)
    with pytest.raises(ProtocolError, match=r"encode_forwarded\(broker_id\): expected str"):
        forwarded_frame(event, 4)  # type: ignore[arg-type]
    size = len(encode_frame(event.with_hop("1"))) - 4
    with pytest.raises(ProtocolError, match=f"Publish needs {size} bytes, over the maximum"):
        forwarded_frame(event, "1", max_frame=size - 1)


def test_bad_sub_ids_and_frames_are_refused_by_name() -> None:
    frame = encode_frame(Publish("e", "p", {"n": 1}, [], 5))
    with pytest.raises(ProtocolError, match=r"deliver_head\(sub_ids\)\[0\]: expected int"):
        deliver_frame(frame, [True])
    with pytest.raises(ProtocolError, match=r"deliver_head\(sub_ids\)\[1\]: .* does not fit"):
        deliver_frame(frame, [1, 2**64])
    with pytest.raises(ProtocolError, match="over the maximum"):
        deliver_frame(frame, [1], max_frame=len(frame) - 4)
    with pytest.raises(ValueError, match="not the frame of a Publish"):
        deliver_frame(encode_frame(Subscribe(1, [["n", ">", 1]])), [1])


@given(
    attributes=events,
    path=st.lists(st.text(max_size=5), max_size=20),
    hop=st.text(max_size=8),
    id_lists=st.lists(sub_id_lists, min_size=1, max_size=4),
)
def test_a_brokers_routed_frames_are_the_encoded_ones(
    attributes: dict, path: list[str], hop: str, id_lists: list[list[int]]
) -> None:
    """`RoutedFrames` gives `forwarded_frame` and `deliver_frame` of sorted ids, also for
    sub ids it has seen before (its kept heads), in any order."""
    frames = RoutedFrames(hop)
    event = Publish("pub:1", "pub", attributes, path, 7)
    frame = frames.publish(event)
    assert frame == forwarded_frame(event, hop)
    for sub_ids in [*id_lists, *id_lists, *(ids[::-1] for ids in id_lists)]:
        expected = encode_frame(event.with_hop(hop).to_deliver(sorted(sub_ids)))
        assert frames.deliver(frame, sub_ids) == expected


def test_routed_frames_refuse_what_the_functions_refuse() -> None:
    with pytest.raises(ProtocolError, match=r"RoutedFrames\(broker_id\): expected str"):
        RoutedFrames(4)  # type: ignore[arg-type]
    event = Publish("e", "p", {"n": 1}, [], 5)
    size = len(encode_frame(event.with_hop("1"))) - 4
    with pytest.raises(ProtocolError, match=f"Publish needs {size} bytes, over the maximum"):
        RoutedFrames("1", max_frame=size - 1).publish(event)
    frames = RoutedFrames("1", max_frame=size)
    frame = frames.publish(event)
    with pytest.raises(ProtocolError, match="Deliver needs .* over the maximum"):
        frames.deliver(frame, [1])  # the Deliver's head is longer than the Publish's
    with pytest.raises(ProtocolError, match=r"deliver_head\(sub_ids\)\[1\]: .* does not fit"):
        frames.deliver(frame, [2**64, 1])
    with pytest.raises(ProtocolError, match=r"deliver_head\(sub_ids\)\[0\]: expected int"):
        frames.deliver(frame, [True])
    assert list(frames._heads) == [1]  # (a valid head; only the frame was too long)


def test_send_encoded_checks_the_state_only() -> None:
    broker = Connection("acceptor")
    frame = deliver_frame(encode_frame(Publish("e", "p", {"n": 1}, [], 5)), [3])
    with pytest.raises(ProtocolError):  # no handshake yet
        broker.send_encoded(Deliver, frame)
    broker.receive_data(Connection("initiator").send(Hello(PROTOCOL_VERSION, "client", "c")))
    broker.send(Welcome(PROTOCOL_VERSION, "b"))
    assert broker.send_encoded(Deliver, frame) is frame
    with pytest.raises(ValueError, match="changes the state"):
        broker.send_encoded(Bye, frame)


# --- a broker's forwarded frame spliced from the payload it received ------------------


def _ints(t: int) -> list[bytes]:
    """The msgpack encodings of ``t``: msgpack's own and the wider ones that hold it."""
    out = [msgpack.packb(t)]
    for code, size, signed in ((0xCC, 1, False), (0xCD, 2, False), (0xCE, 4, False),
                               (0xCF, 8, False), (0xD3, 8, True)):  # fmt: skip
        with contextlib.suppress(OverflowError):
            out.append(bytes((code,)) + t.to_bytes(size, "big", signed=signed))
    return out


def _arrays(items: list[str]) -> list[bytes]:
    """The msgpack encodings of a list of strings: fixarray, array 16 and array 32."""
    body = b"".join(msgpack.packb(item) for item in items)
    n = len(items)
    return [msgpack.packb(items), b"\xdc" + n.to_bytes(2, "big") + body,
            b"\xdd" + n.to_bytes(4, "big") + body]  # fmt: skip


def _strs(text: str) -> list[bytes]:
    """The msgpack encodings of a short string: its own and str 8."""
    data = text.encode()
    return [msgpack.packb(text), b"\xd9" + bytes((len(data),)) + data]


@given(
    attributes=events,
    event_id=st.text(max_size=8),
    path=st.lists(st.text(max_size=5), max_size=3),
    t_ns=st.integers(min_value=-(2**63), max_value=2**64 - 1),
    hop=st.text(min_size=1, max_size=8),
    choice=st.tuples(st.integers(0, 1), st.integers(0, 2), st.integers(0, 5)),
    sub_ids=sub_id_lists,
)
def test_a_received_event_is_forwarded_as_the_message_it_was(
    attributes: dict, event_id: str, path: list[str], t_ns: int, hop: str,
    choice: tuple[int, int, int], sub_ids: list[int],
) -> None:  # fmt: skip
    """Whatever encoding the sender chose for the id, the path and the time, the frame
    `publish_received` makes of its payload decodes to the event with this broker's hop,
    as `publish` would send it; msgpack's own encoding of an event from its publisher
    gives `publish`'s bytes exactly. `deliver_received` gives the bytes of the Deliver
    spliced from that frame."""
    ids, paths, times = _strs(event_id), _arrays(path), _ints(t_ns)
    payload = b"".join((PUBLISH_HEAD, ids[choice[0]], msgpack.packb("pub"),
                        msgpack.packb(attributes), paths[choice[1]],
                        times[min(choice[2], len(times) - 1)]))  # fmt: skip
    event = decode_message(payload)
    # (compared encoded again: an attribute may be NaN)
    assert encode_frame(event) == encode_frame(Publish(event_id, "pub", attributes, path, t_ns))
    frames = RoutedFrames(hop)
    frame = frames.publish_received(publish_array(event), payload)
    assert int.from_bytes(frame[:4], "big") == len(frame) - 4
    assert encode_frame(decode_message(frame[4:])) == encode_frame(event.with_hop(hop))
    if choice == (0, 0, 0):
        assert frame == frames.publish(event)
    delivered = frames.deliver_received(publish_array(event), payload, sub_ids)
    assert delivered == frames.deliver(frame, sub_ids)
    assert (
        frames.deliver_received(publish_array(event), payload, sub_ids) == delivered
    )  # a kept head too


def test_the_splice_keeps_the_publishers_bytes_and_takes_only_what_proves_the_layout() -> None:
    """The splice is taken for an event from its publisher whose payload ends in the empty
    path and the time as a uint64 (a str 8 id stays str 8: the bytes were not encoded
    again); any other ending is encoded again."""
    t_ns = 1_800_000_000_000_000_000  # msgpack's own encoding of a time now: uint64
    tail = b"\x90\xcf" + t_ns.to_bytes(8, "big")
    head = PUBLISH_HEAD + b"\xd9\x01e" + msgpack.packb("p") + msgpack.packb({"n": 1})
    event = decode_message(head + tail)
    frames = RoutedFrames("b1")
    spliced = frames.publish_received(publish_array(event), head + tail)
    assert b"\xd9\x01e" in spliced
    assert spliced != frames.publish(event)
    assert decode_message(spliced[4:]) == event.with_hop("b1")
    for other in (
        head + b"\x90\xd3" + t_ns.to_bytes(8, "big"),  # the time as an int64
        head + b"\xdc\x00\x00\xcf" + t_ns.to_bytes(8, "big"),  # the path as an array 16
        head + b"\x91\xa1a\xcf" + t_ns.to_bytes(8, "big"),  # a forwarded event
        head + b"\x90\x05",  # a time that is not a uint64
    ):
        received = decode_message(other)
        assert frames.publish_received(publish_array(received), other) == frames.publish(received)
        delivered = frames.deliver(frames.publish(received), [3])
        assert frames.deliver_received(publish_array(received), other, [3]) == delivered
    assert frames.deliver_received(publish_array(event), head + tail, [3]) == frames.deliver(
        spliced, [3]
    )


def test_a_spliced_frame_over_the_maximum_is_encoded_again_or_refused() -> None:
    """A publisher's wider encoding that would make the forwarded frame too long is
    encoded again; an event too long either way is refused as `publish` refuses it."""
    t_ns = 2**40
    tail = b"\x90\xcf" + t_ns.to_bytes(8, "big")
    wide = PUBLISH_HEAD + b"\xd9\x01e" + msgpack.packb("p") + msgpack.packb({"n": 1}) + tail
    event = decode_message(wide)
    size = len(encode_frame(event.with_hop("1"))) - 4  # one byte less than spliced
    frames = RoutedFrames("1", max_frame=size)
    assert frames.publish_received(publish_array(event), wide) == frames.publish(event)
    with pytest.raises(ProtocolError, match=f"Publish needs {size} bytes, over the maximum"):
        RoutedFrames("1", max_frame=size - 1).publish_received(publish_array(event), wide)
    # and a Deliver: `head` in place of the Publish's two bytes
    head_size = len(deliver_frame(encode_frame(event), [7])) - len(encode_frame(event)) + 2
    frames = RoutedFrames("1", max_frame=size - 2 + head_size)
    assert frames.deliver_received(publish_array(event), wide, [7]) == frames.deliver(
        frames.publish(event), [7]
    )
    with pytest.raises(ProtocolError, match="Deliver needs .* bytes, over the maximum"):
        RoutedFrames("1", max_frame=size - 3 + head_size).deliver_received(
            publish_array(event), wide, [7]
        )
