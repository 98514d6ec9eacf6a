"""`hop stats --every`: rates from two replies of a broker's counters (pure), the
connection kept from one interval to the next, and the table of a real network."""

from __future__ import annotations

import io
import json
import threading
import time
from typing import Any

import pytest

import client
from broker.cli import EXIT_BAD_INPUT, EXIT_OK
from broker.local_network import Network
from broker.messages import ProtocolError
from client import stats_watch
from client.stats_watch import (
    Rates,
    Reading,
    Target,
    clients,
    header,
    json_value,
    parent_state,
    rates,
    reading,
    sample_times,
    table_line,
)
from hop.cli import main as hop_main
from tests.processes import wait_for


def _link(kind: str, events_out: int, dropped: int = 0) -> dict[str, Any]:
    return {"kind": kind, "events_out": events_out, "events_dropped": dropped, "queue_depth": 2}


def _stats(seconds: float, routed: int, links: dict[str, Any], **changes: Any) -> dict[str, Any]:
    stats = {
        "pid": 10,
        "uptime_s": seconds,
        "time_ns": int(seconds * 1e9),
        "cpu_s": seconds / 4,
        "events_routed": routed,
        "events_dropped": 0,
        "subscriptions": 3,
        "parent": "1",
        "parent_connected": 1,
        "parent_problem": "",
        "parent_unreachable_s": 0.0,
        "links": links,
    }
    return stats | changes


def test_rates_are_the_counters_changes_over_the_brokers_own_clock() -> None:
    before = _stats(
        10, 1000, {"client:a#1": _link("client", 500), "broker:1": _link("broker", 400)}
    )
    after = _stats(
        12,
        1600,
        {"client:a#1": _link("client", 800, dropped=3), "broker:1": _link("broker", 700)},
        events_dropped=3,  # the queue-full drops at client a, counted there too
        cpu_s=10 / 4 + 0.5,
    )
    assert rates(before, after) == Rates(
        routed_per_s=300.0,
        delivered_per_s=150.0,
        forwarded_per_s=150.0,
        dropped=3,
        cpu_percent=25.0,
    )


def test_a_link_opened_in_the_interval_counts_from_zero_and_a_closed_one_is_left_out() -> None:
    before = _stats(1, 0, {"client:old#1": _link("client", 900)})
    after = _stats(2, 50, {"client:new#2": _link("client", 40)})
    found = rates(before, after)
    assert found is not None and found.delivered_per_s == 40.0  # not 40 - 900


@pytest.mark.parametrize(
    "changes", [{"pid": 11}, {"uptime_s": 0.5, "time_ns": 3 * 10**9}, {"time_ns": 10**9}]
)
def test_no_rates_across_a_restart_or_out_of_order_replies(changes: dict[str, Any]) -> None:
    assert rates(_stats(1, 100, {}), _stats(2, 5, {}) | changes) is None


def test_the_table_counts_others_clients_and_tells_the_parent_link() -> None:
    links = {
        "client:hop-stats-7#3": _link("client", 0),
        "client:hop-stats-77#4": _link("client", 0),  # another's, whose name starts alike
        "client:sub#1": _link("client", 0),
        "broker:2": _link("broker", 0),
    }
    assert clients(_stats(1, 0, links), "hop-stats-7") == 2
    assert parent_state(_stats(1, 0, {}, parent="")) == "root"
    assert parent_state(_stats(1, 0, {})) == "up"
    down = _stats(
        1, 0, {}, parent_connected=0, parent_problem="connection refused", parent_unreachable_s=4.5
    )
    assert parent_state(down) == "down 4.5 s: connection refused"


def test_a_rows_values_sit_under_their_column_names() -> None:
    before = _stats(1, 0, {"client:a#1": _link("client", 0)})
    after = _stats(3, 2000, {"client:a#1": _link("client", 1000)}, parent="")
    line = table_line("12:00:00", "12", 6, reading(before, after, "me"))
    names = header(6)
    for name, value in [("routed/s", "1000.0"), ("delivered/s", "500.0"), ("queued", "2")]:
        end = names.index(name) + len(name)
        assert line[end - len(value) : end] == value, (name, names, line)
    assert line.endswith("  root") and names.endswith("  parent")
    restarted = reading(after, before, "me")
    assert table_line("12:00:00", "12", 6, restarted).endswith(
        "  restarted: rates from the next interval"
    )
    assert json_value(restarted) == {"restarted": True}
    assert json_value(Reading(problem="no answer within 5 s")) == {"error": "no answer within 5 s"}
    assert json_value(reading(before, after, "me")) == {
        "routed_per_s": 1000.0,
        "delivered_per_s": 500.0,
        "forwarded_per_s": 0.0,
        "dropped": 0,
        "cpu_percent": 25.0,
        "subscriptions": 3,
        "clients": 1,
        "queued": 2,
        "parent": "root",
    }


def test_samples_keep_to_their_grid_and_skip_the_points_a_slow_one_overran() -> None:
    """A broker slow to answer delays one sample; the next ones come on the grid again
    rather than in a burst making up for the points missed."""
    taken: list[float] = []
    for tick in sample_times(0.1, 5):
        taken.append(tick)
        if len(taken) == 2:
            time.sleep(0.35)  # past the next three points
    gaps = [b - a for a, b in zip(taken, taken[1:], strict=False)]
    assert len(taken) == 6 and min(gaps) > 0.05, gaps


class _Session:
    """A stand-in connection: answers from a list, closes when told."""

    def __init__(self, answers: list[dict[str, Any] | Exception]) -> None:
        self.answers = answers
        self.closed = False

    def ask(self) -> dict[str, Any]:
        answer = self.answers.pop(0)
        if isinstance(answer, Exception):
            raise answer
        return answer

    def close(self) -> None:
        self.closed = True


def test_a_target_keeps_its_connection_and_makes_a_failed_one_again_once() -> None:
    made: list[_Session] = []
    plans: list[list[dict[str, Any] | Exception]] = [
        [{"n": 1}, {"n": 2}, ConnectionResetError("cut")],  # quiet too long: cut
        [{"n": 3}, ConnectionResetError("restarted")],  # made again at once
        [ProtocolError("auth", "refused")],  # a fresh one fails: told, not retried
        [{"n": 4}],
    ]

    def connect() -> Any:
        made.append(_Session(plans[len(made)]))
        return made[-1]

    target = Target("1", connect)
    assert [target.ask()["n"] for _ in range(3)] == [1, 2, 3]
    assert len(made) == 2
    with pytest.raises(ProtocolError):
        target.ask()  # the second connection fails, the third is refused
    assert target.ask() == {"n": 4}
    target.close()
    assert made[-1].closed and len(made) == 4


@pytest.mark.parametrize(("keep_s", "connections"), [(10.0, 1), (0.05, 3)])
def test_a_watch_keeps_one_connection_unless_its_intervals_outlast_a_heartbeat(
    monkeypatch: pytest.MonkeyPatch, keep_s: float, connections: int
) -> None:
    """Intervals longer than `KEEP_CONNECTION_S` would have the broker cut the quiet
    connection: each request then has one of its own, closed after it."""
    monkeypatch.setattr(stats_watch, "KEEP_CONNECTION_S", keep_s)
    made: list[_Session] = []

    def connect() -> Any:
        made.append(_Session([_stats(n, 10 * n, {}) for n in range(1, 4)][len(made) :]))
        return made[-1]

    out = io.StringIO()
    own = "me"
    assert stats_watch.watch([Target("1", connect)], 0.1, 2, out, own, str, as_json=True)
    assert len(made) == connections and all(session.closed for session in made)
    lines = [json.loads(line) for line in out.getvalue().splitlines()]
    assert [line["brokers"]["1"]["routed_per_s"] for line in lines] == [10.0, 10.0]


@pytest.mark.parametrize(
    ("option", "said"),
    [
        (["--count", "3"], "--count and --json go with --every"),
        (["--json"], "--count and --json go with --every"),
        (["--every", "0.05"], "argument --every: must be at least 0.1 s, got 0.05"),
        (["--every", "nan"], "argument --every: must be a finite number more than 0, got nan"),
    ],
)
def test_a_watch_takes_its_options_with_every_and_a_sensible_interval(
    capsys: pytest.CaptureFixture[str], option: list[str], said: str
) -> None:
    try:
        code = hop_main(["stats", "tree7", *option])
    except SystemExit as exc:  # argparse's own refusal
        code = exc.code
    assert code == EXIT_BAD_INPUT
    assert said in capsys.readouterr().err


def _table(out: str) -> dict[str, list[list[str]]]:
    """Each broker's rows of a watch's output, split into cells."""
    lines = out.splitlines()
    assert lines[0].split()[:3] == ["time", "broker", "routed/s"]
    rows: dict[str, list[list[str]]] = {}
    for line in lines[1:]:
        cells = line.split()
        rows.setdefault(cells[1], []).append(cells[2:])
    return rows


@pytest.mark.integration
def test_hop_stats_every_shows_a_networks_rates_and_names_a_broker_that_is_down(
    chain5: Network, capsys: pytest.CaptureFixture[str]
) -> None:
    """Events published at the end of the line, wanted at its root: every broker routes
    them, the leaf's clients deliver none, the root delivers each."""
    stop = threading.Event()
    root, leaf = chain5.address(1), chain5.address(5)
    with client.Client.connect(*root, name="sub") as sub_client:
        sub = sub_client.subscribe("n exists")

        def publish() -> None:
            with client.Client.connect(*leaf, name="pub") as pub:
                while not stop.wait(0.002):
                    pub.publish({"n": 1})

        publisher = threading.Thread(target=publish)
        publisher.start()
        try:
            sub.next(timeout=10)  # the line carries events end to end
            code = hop_main(["stats", str(chain5.file), "--every", "0.5", "--count", "2"])
        finally:
            stop.set()
            publisher.join()
    assert code == EXIT_OK
    table = _table(capsys.readouterr().out)
    assert sorted(table) == ["1", "2", "3", "4", "5"]
    for broker, cells in table.items():
        assert len(cells) == 2  # one row per interval once a baseline was taken
        routed, delivered, forwarded, dropped, subs, clients_, queued, cpu, parent = cells[-1]
        assert float(routed) > 50, (broker, cells)
        assert float(delivered) > 50 if broker == "1" else float(delivered) == 0
        assert float(forwarded) == 0 if broker == "1" else float(forwarded) > 50
        assert dropped == "0" and float(cpu) > 0
        assert parent == ("root" if broker == "1" else "up")
        assert clients_ == ("1" if broker in "15" else "0")  # not the watch itself

    chain5.kill(3)
    wait_for(lambda: not chain5.stats(4)["parent_connected"], "broker 4 seeing 3 gone", 10)
    assert hop_main(["stats", str(chain5.file), "--every", "0.3", "--count", "1"]) == 1
    table = _table(capsys.readouterr().out)
    refused = "connection refused (is the broker running?)"
    assert [" ".join(cells) for cells in table["3"]] == [refused, refused]
    assert " ".join(table["4"][-1][8:]).startswith("down ")

    command = ["stats", str(chain5.file), "--every", "0.3", "--count", "1", "--json"]
    assert hop_main(command) == 1
    first, second = (json.loads(line) for line in capsys.readouterr().out.splitlines())
    assert first["brokers"] == {"3": {"error": refused}}  # told at the first request
    assert sorted(second["brokers"]) == ["1", "2", "3", "4", "5"]
    assert second["brokers"]["4"]["parent"].startswith("down ")
    assert second["brokers"]["1"]["parent"] == "root" and second["time"].endswith("+00:00")
