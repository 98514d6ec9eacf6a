"""`hop ping`: probes published at one broker and taken at another, timed on the
client's clock, lost ones counted. Real brokers on 127.0.0.1 (chain5), stopped by PID."""

from __future__ import annotations

import re

import pytest

from broker.cli import EXIT_FAILURE, EXIT_OK
from broker.local_network import Network
from broker.netio import host_port
from client.ping import Pings
from hop.cli import main as hop_main
from tests.processes import wait_for


def test_the_summary_gives_the_latencies_order_statistics_and_the_lost() -> None:
    pings = Pings(sent=4, latencies_ms=[1.0, 4.0, 2.0], lost=[3])
    assert pings.summary(("127.0.0.1", 7301), ("::1", 7304)) == (
        "4 probe(s) from 127.0.0.1:7301 to [::1]:7304: 3 delivered, 1 lost; "
        "latency min 1.000, median 2.000, mean 2.333, max 4.000 ms"
    )
    assert Pings(sent=1, lost=[1]).summary(("h", 1), ("h", 1)) == (
        "1 probe(s) from h:1 to h:1: 0 delivered, 1 lost"
    )


PROBE = re.compile(r"probe (\d+): (\d+\.\d{3}) ms through ([\d>]+)")


@pytest.mark.integration
def test_hop_ping_times_probes_along_the_line_and_counts_those_lost(
    chain5: Network, capsys: pytest.CaptureFixture[str]
) -> None:
    leaf, root = host_port(*chain5.address(5)), host_port(*chain5.address(1))
    command = ["ping", leaf, "--to", root, "--count", "3", "--interval", "0.05"]
    assert hop_main(command) == EXIT_OK
    *lines, summary = capsys.readouterr().out.splitlines()
    probes = [PROBE.fullmatch(line) for line in lines]
    assert all(probes), lines
    assert [(m[1], m[3]) for m in probes if m] == [(str(n), "5>4>3>2>1") for n in (1, 2, 3)]
    assert all(0 < float(m[2]) < 2000 for m in probes if m)
    assert summary.startswith(f"3 probe(s) from {leaf} to {root}: 3 delivered, 0 lost; latency")

    chain5.kill(3)
    wait_for(lambda: not chain5.stats(4)["parent_connected"], "broker 4 seeing 3 gone", 10)
    command = [*command[:4], "--count", "2", "--interval", "0.05", "--timeout", "0.3"]
    assert hop_main(command) == EXIT_FAILURE
    assert capsys.readouterr().out.splitlines() == [
        "probe 1: lost (not delivered within 0.3 s)",
        "probe 2: lost (not delivered within 0.3 s)",
        f"2 probe(s) from {leaf} to {root}: 0 delivered, 2 lost",
    ]
    assert hop_main(["ping", leaf, "--count", "1"]) == EXIT_OK  # within broker 5 itself
    assert capsys.readouterr().out.splitlines()[0].endswith(" ms through 5")
