"""A case study replayed across hosts: three network namespaces as hosts (capability
`netns`), brokers on two of them, client processes on all three, `hop replay` itself on
the third, every process started through the launcher `ip netns exec {host}`.

The namespaces share this machine's filesystem, so the run folder on the other hosts
(the deployment's workdir) is a separate folder here, and the copy templates (`cp`)
really put the case study there and gather the traces back, as `scp` would between
machines. All traffic stays between the namespaces created here.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pyarrow.ipc as ipc
import pytest

from broker.local_network import REPO
from hop.command import HOP
from tests import netns

pytestmark = [pytest.mark.integration, pytest.mark.needs("netns")]

PREFIX = f"hr{os.getpid() % 100000}"
SWITCH = f"{PREFIX}sw"
SUBNET = f"10.201.{os.getpid() % 250 + 1}"
HOSTS = {"a": 1, "b": 2, "c": 3}  # name -> last byte of its address


def ns(host: str) -> str:
    return f"{PREFIX}{host}"


def address(host: str) -> str:
    return f"{SUBNET}.{HOSTS[host]}"


@pytest.fixture
def hosts() -> Iterator[None]:
    made: list[str] = []
    try:
        netns.build(SWITCH, {ns(host): address(host) for host in HOSTS}, made)
        yield
    finally:
        netns.delete(made)


def case_study(workdir: Path) -> Path:
    """Brokers 1 and 2 on host a, 3 on host b; a publisher and a subscriber placed by hand
    on host c, the other clients on their brokers' hosts (one process each)."""
    text = f"""
name = "hosts3"
host = "{address("a")}"
base_port = 7100

[[brokers]]
id = 1

[[brokers]]
id = 2
parent = 1

[[brokers]]
id = 3
parent = 1
host = "{address("b")}"

[workload]
families = 12
duration_s = 3.0
warmup_s = 1.0
drain_s = 1.0

[[publishers]]
id = 1
broker = 2
rate = 25.0

[[publishers]]
id = 2
broker = 3
rate = 25.0

[[subscribers]]
id = 1
broker = 2
filters = ["family <= 6"]

[[subscribers]]
id = 2
broker = 3
filters = ["family > 3"]

[[subscribers]]
id = 3
broker = 1
filters = ["family = 5", "family = 11"]

[deployment]
launcher = "ip netns exec {{host}} {{command}}"
workdir = "{workdir / "on-the-hosts"}"
copy_to = "cp {{path}} {{dest}}"
copy_from = "cp -r {{path}}/. {{dest}}"
"""
    for host in HOSTS:
        text += f'\n[[deployment.hosts]]\naddress = "{address(host)}"\nname = "{ns(host)}"\n'
    text += f'\n[[deployment.processes]]\nhost = "{ns("c")}"\npublishers = [2]\nsubscribers = [3]\n'
    path = workdir / "hosts3.toml"
    path.write_text(text)
    return path


@pytest.mark.needs("java")  # hop analyze runs Spark
def test_netns_replay_across_three_hosts_then_analyze_and_predict(
    hosts: None, tmp_path: Path
) -> None:
    study = case_study(tmp_path)
    run = tmp_path / "run"
    replay = subprocess.run(
        ["ip", "netns", "exec", ns("c"), sys.executable, "-m", "hop", "replay", str(study),
         "--out", str(run), "--quiet"],
        capture_output=True, text=True, timeout=240, cwd=REPO, check=False,
    )  # fmt: skip
    assert replay.returncode == 0, replay.stderr[-3000:]
    assert "lost 0, unexpected 0" in replay.stdout, replay.stdout

    manifest = json.loads((run / "manifest.json").read_text())
    placed = {p["name"]: p["host"] for p in manifest["processes"] if p["kind"] == "clients"}
    brokers = {p["name"]: p["host"] for p in manifest["processes"] if p["kind"] == "broker"}
    assert brokers == {"broker1": ns("a"), "broker2": ns("a"), "broker3": ns("b")}
    assert placed == {
        "clients1": ns("c"), "pub1": ns("a"), "sub1": ns("a"), "sub2": ns("b"),
    }  # fmt: skip
    assert manifest["counts"]["delivered"] == manifest["counts"]["expected_deliveries"] > 0

    traces = run / "traces"
    hops = {p.name.split("-")[1] for p in traces.glob("hops-*.arrow")}
    assert hops == {"broker1", "broker2", "broker3"}  # from hosts a and b
    owners = {p.name.split("-")[1] for p in traces.glob("deliveries-*.arrow")}
    assert {"clients1", "sub1", "sub2"} <= owners  # from hosts c, a and b
    for path in traces.glob("*.arrow"):  # gathered whole
        with ipc.open_stream(path) as reader:
            reader.read_all()

    for command in (["analyze", str(run)], ["predict", str(run), "--method", "mm1"]):
        done = subprocess.run(
            [*HOP, *command], capture_output=True, text=True, timeout=300, check=False
        )
        assert done.returncode == 0, done.stderr[-3000:]
    assert (run / "analysis" / "predictions.parquet").exists()
