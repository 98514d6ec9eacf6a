"""bench.floor_relay speaks the protocol to our client on each of its loops and hands it
every event, spliced or decoded; bench.latency_floor's short run reports every system's
p50 per round and the paired differences it names, and its table of result files is
what docs/performance.md shows."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import trio

import client
from bench import floor_relay, latency_floor
from bench.common import median
from broker.protocol import PROTOCOL_VERSION, Hello, Ping, Publish, Subscribe, encode_frame


@pytest.mark.parametrize(
    "system",
    [
        "floor-trio",
        "floor-epoll",
        "floor-thread",
        "floor-trio-decode",
        "floor-trio-route",
        "floor-epoll-route",
        "floor-thread-route",
    ],
)
def test_the_relay_delivers_to_the_newest_subscription(system: str, tmp_path: Path) -> None:
    """Every event, spliced (one frame a read) or decoded; with routing, only those
    the newest subscription's filter matches."""
    relay = latency_floor.FloorRelay(system)
    port = relay.start(tmp_path)

    async def main() -> list[int]:
        async with (
            client.open_client("127.0.0.1", port, name="sub") as sub_client,
            client.open_client("127.0.0.1", port, name="pub") as pub_client,
        ):
            await sub_client.subscribe("n > 1000")  # older: gets nothing
            sub = await sub_client.subscribe("n >= 10")
            for n in range(20):  # one frame a read: spliced
                await pub_client.publish({"n": n})
                await trio.sleep(0.002)
            await pub_client.publish_many([{"n": n} for n in range(20, 60)])  # decoded
            await pub_client.flush()
            got: list[int] = []
            with trio.move_on_after(0.5 if system.endswith("route") else 10):
                while len(got) < 60:
                    got += [d.attributes["n"] for d in await sub.next_batch()]
            assert sub.id == 2
            return got

    try:
        routed = system.endswith("route")
        assert trio.run(main) == list(range(10 if routed else 0, 60))
        assert relay.cpu_s() > 0  # its start-up and the events
    finally:
        relay.stop()


def test_the_relay_yields_the_cpu_after_writing_events(monkeypatch: pytest.MonkeyPatch) -> None:
    """As the broker after a short read: once per read that wrote events, spliced or
    decoded; not after a read that only answered."""
    yields: list[None] = []
    monkeypatch.setattr("bench.floor_relay.os.sched_yield", lambda: yields.append(None))
    written: list[bytes] = []
    relay = floor_relay.Relay()
    peer = floor_relay.Peer(written.append)
    hello = Hello(PROTOCOL_VERSION, "client", "sub")
    for message in (hello, Subscribe(1, []), Ping(7)):
        relay.received(peer, encode_frame(message))
    assert not yields and len(written) == 3  # the answers only
    event = Publish("p:1", "p", {"n": 1}, [], 1)
    relay.received(peer, encode_frame(event))  # one whole frame: spliced
    assert len(yields) == 1
    relay.received(peer, encode_frame(event) + encode_frame(event))  # decoded
    assert len(yields) == 2 and len(written) == 6


def test_a_short_run_reports_each_system_and_the_paired_differences() -> None:
    systems = ("hop-trio", "floor-trio-route", "floor-trio", "floor-epoll")
    result = latency_floor.run(rounds=2, events=200, systems=systems)
    assert result["skipped"] == {} and list(result["p50_us"]) == list(systems)
    for system in systems:
        p50 = result["p50_us"][system]
        assert len(p50) == 2 and all(0 < v < 100_000 for v in p50)
        assert result["p50_median_us"][system] == median(p50)
        assert result["broker_cpu_us_per_event"][system] > 0
        assert result["lost"][system] == 0
    p50 = result["p50_us"]
    differences = result["differences_us"]
    assert set(differences) == {"hop-trio - floor-trio-route", "floor-trio - floor-epoll"}
    paired = [a - b for a, b in zip(p50["floor-trio"], p50["floor-epoll"], strict=True)]
    assert differences["floor-trio - floor-epoll"] == {
        "measures": "trio's pass",
        "median": median(paired),
        "range": [min(paired), max(paired)],
    }


REPO = Path(__file__).resolve().parent.parent
DOCS_TABLES = [  # the result files of each latency_floor table in docs/performance.md
    ["amd_e9e19e1", "amd_e9e19e1_b", "amd_861589e"],
    [
        "amd_epoll_route_b4fbaef_a",
        "amd_epoll_route_b4fbaef_b",
        "amd_epoll_route_4191f40",
        "amd_threads_a620611_a",
        "amd_threads_a620611_b",
        "amd_threads_52ccd98",
    ],
]


def test_the_docs_tables_are_the_tools_output_for_the_committed_files() -> None:
    """docs/performance.md's side-by-side tables of the AMD runs are what
    `python -m bench.latency_floor --table` prints for the files they name."""
    doc = (REPO / "docs" / "performance.md").read_text()
    for names in DOCS_TABLES:
        files = [REPO / "bench" / "results" / f"latency_floor_{name}.json" for name in names]
        assert latency_floor.table(files) in doc


def test_the_table_pairs_each_round_with_the_baselines_and_leaves_absent_systems_blank(
    tmp_path: Path,
) -> None:
    one, two = tmp_path / "latency_floor_one.json", tmp_path / "latency_floor_two.json"
    one.write_text(json.dumps({"p50_us": {"hop-trio": [90.0, 120.0, 100.0],
                                          "mosquitto-gmqtt": [100.0, 100.0, 100.0]}}))  # fmt: skip
    two.write_text(json.dumps({"p50_us": {"floor-epoll": [50.0, 80.0]}}))
    assert latency_floor.table([one, two]).splitlines() == [
        "| system | one | two |",
        "|---|---|---|",
        "| hop-trio | 100; 1.00x, 1 of 3 |  |",  # ratios 0.9, 1.2, 1.0: one lower
        "| floor relay, epoll |  | 65 |",  # no baseline in that file: the p50 alone
        "| mosquitto-gmqtt | 100 |  |",
    ]


def test_a_file_that_is_no_latency_floor_result_is_named(tmp_path: Path) -> None:
    other = tmp_path / "other.json"
    other.write_text(json.dumps({"systems": {}}))
    with pytest.raises(ValueError, match=r"other\.json: not a latency_floor result"):
        latency_floor.table([other])
