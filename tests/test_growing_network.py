"""A broker added to a running network: its parent reads its topology file again when
a broker it does not know as a child says Hello, and takes the child if the file now
lists it. Real `hop broker` processes on 127.0.0.1, stopped by PID."""

from __future__ import annotations

import json
import signal
import subprocess
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import client
from broker.local_network import REPO, free_base_port
from broker.probe import fetch_stats
from hop.command import HOP
from tests.processes import wait_for
from topologies import BrokerSpec, Topology
from topologies.generators import to_toml

HOST = "127.0.0.1"


@contextmanager
def hop_broker(study: Path, broker_id: int) -> Iterator[list[str]]:
    """`hop broker STUDY --id N` until the block ends (SIGTERM, then its exit); yields a
    list that then holds its log's lines."""
    lines: list[str] = []
    with tempfile.TemporaryFile("w+") as log:
        proc = subprocess.Popen(
            [*HOP, "broker", str(study), "--id", str(broker_id)],
            cwd=REPO, stdout=subprocess.DEVNULL, stderr=log, text=True,
        )  # fmt: skip
        try:
            yield lines
        finally:
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(timeout=30)
            finally:
                if proc.poll() is None:
                    proc.kill()
                    proc.wait()
            log.seek(0)
            lines += log.read().splitlines()


def network(parents: dict[int, int | None], base_port: int, root_host: str = HOST) -> Topology:
    """Brokers by their parents, broker N on HOST:BASE_PORT+N (the root's host named
    `root_host` in the file, for a file whose entry for the root differs)."""
    brokers = {
        b: BrokerSpec(b, parent, root_host if parent is None else HOST, base_port + b)
        for b, parent in parents.items()
    }
    return Topology(name="growing", host=HOST, base_port=base_port, brokers=brokers)


def test_a_broker_added_to_the_file_joins_its_running_parent(tmp_path: Path) -> None:
    """Broker 2, added to the file of the running root, joins it; broker 3, listed only
    in its own file, is refused; broker 4, added to a file whose entry for the root
    itself changed (which takes a restart), is refused with a warning."""
    base = free_base_port(4)
    study = tmp_path / "growing.toml"
    study.write_text(to_toml(network({1: None}, base)))
    grown = network({1: None, 2: 1}, base)
    own_files = {}
    for broker in (3, 4):  # each one's own idea of the network
        own_files[broker] = tmp_path / f"own{broker}.toml"
        own_files[broker].write_text(to_toml(network({1: None, broker: 1}, base)))

    def stats(broker: int) -> dict[str, object]:
        return fetch_stats(HOST, base + broker, timeout=2)

    def refused(broker: int) -> bool:
        return "not a child of broker 1" in str(stats(broker)["parent_problem"])

    with hop_broker(study, 1) as root_log:
        wait_for(lambda: bool(stats(1)["pid"]), "broker 1 answering")
        study.write_text(to_toml(grown))  # broker 2 added: the root runs on
        with hop_broker(study, 2), hop_broker(own_files[3], 3):
            wait_for(lambda: stats(2)["parent_connected"] == 1, "broker 2 linked to 1")
            wait_for(lambda: refused(3), "broker 3 refused")
            assert stats(1)["children_connected"] == 1
            with (
                client.Client.connect(HOST, base + 1, name="sub") as sub_client,
                client.Client.connect(HOST, base + 2, name="pub") as pub,
            ):
                sub = sub_client.subscribe("n exists")
                pub.publish({"n": 1})
                assert sub.next(timeout=10) == {"n": 1}
        study.write_text(to_toml(network({1: None, 2: 1, 4: 1}, base, root_host="localhost")))
        with hop_broker(own_files[4], 4):
            wait_for(lambda: refused(4), "broker 4 refused")
    records = [json.loads(line) for line in root_log]
    assert [r["child"] for r in records if r["event"] == "child_added"] == [2]
    assert {r["child"] for r in records if r["event"] == "topology_changed"} == {4}
