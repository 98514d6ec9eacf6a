"""`hop replay` as deployed: client processes of their own, brokers a user already
runs (`--attach`), and what happens when a process or a host fails."""

from __future__ import annotations

import dataclasses
import json
import os
import signal
import subprocess
import time
from pathlib import Path

import pytest

from hop.command import HOP, stop, wait_ready
from monitor.characterize import characterize
from monitor.errors import ReplayError
from monitor.placement import client_processes
from monitor.replay import await_traces_written
from tests.processes import cmdline, descendants, parent_of, running
from tests.test_replay import small_study
from topologies import Deployment, HostSpec, ProcessSpec, load_case_study
from topologies.generators import to_toml

pytestmark = pytest.mark.integration

HERE = HostSpec("127.0.0.1", "here")


def _with_deployment(path: Path, deployment: Deployment) -> Path:
    study = dataclasses.replace(load_case_study(path), deployment=deployment)
    out = path.with_name(f"{path.stem}-deployed.toml")
    out.write_text(to_toml(study))
    return out


def test_clients_run_one_process_each_by_default(tmp_path: Path) -> None:
    _, study = small_study(tmp_path, "hierarchical")
    study = dataclasses.replace(study, deployment=Deployment())
    processes = client_processes(study, HERE)
    assert len(processes) == len(study.publishers) + len(study.subscribers)
    assert all(len(p.publishers) + len(p.subscribers) == 1 for p in processes)
    home = {p.name: p.host.address for p in processes}
    assert home["pub1"] == study.topology.address(study.publishers[1].broker)[0]


def test_placement_by_broker_by_hand_and_single(tmp_path: Path) -> None:
    _, study = small_study(tmp_path, "hierarchical")
    by_broker = dataclasses.replace(
        study,
        deployment=Deployment(clients="broker", processes=(ProcessSpec("10.9.9.9", (1,), (2,)),)),
    )
    processes = client_processes(by_broker, HERE)
    placed = processes[0]
    assert (placed.host.address, placed.publishers, placed.subscribers) == ("10.9.9.9", (1,), (2,))
    rest = processes[1:]
    brokers = {s.broker for s in study.subscribers.values() if s.id != 2}
    brokers |= {p.broker for p in study.publishers.values() if p.id != 1}
    assert sorted(p.name for p in rest) == sorted(f"clients-b{b}" for b in brokers)
    every = [c for p in processes for c in p.clients]
    assert sorted(every) == sorted(set(every))  # each client runs once
    assert len(every) == len(study.publishers) + len(study.subscribers)
    single = dataclasses.replace(study, deployment=Deployment(clients="single"))
    (only,) = client_processes(single, HERE)
    assert only.host == HERE and len(only.clients) == len(every)


@pytest.mark.parametrize("clients", ["process", "broker", "single"])
def test_every_placement_delivers_exactly_what_the_filters_match(
    tmp_path: Path, clients: str
) -> None:
    path, _ = small_study(tmp_path, "hierarchical")
    path = _with_deployment(path, Deployment(clients=clients))  # type: ignore[arg-type]
    out = tmp_path / "run"
    done = _hop("replay", str(path), "--out", str(out), "--quiet")
    assert done.returncode == 0, done.stderr
    assert "lost 0, unexpected 0" in done.stdout
    manifest = json.loads((out / "manifest.json").read_text())
    processes = [p for p in manifest["processes"] if p["kind"] == "clients"]
    brokers = [p for p in manifest["processes"] if p["kind"] == "broker"]
    expected = {"process": 12, "broker": 4, "single": 1}[clients]
    assert len(processes) == expected and len(brokers) == 7
    assert all(p["clock_offset_ns"] == 0 for p in processes)  # one host, one clock
    for p in processes + brokers:  # CPU per phase, of every process
        assert set(p["cpu_s"]) == {"warmup", "measure", "drain"}, p
        assert all(seconds >= 0 for seconds in p["cpu_s"].values()), p
    assert manifest["phases"]["cpu_s"]["clients"] == pytest.approx(
        sum(p["cpu_s"]["measure"] for p in processes)
    )
    assert {str(b["name"][6:]): b["cpu_s"]["measure"] for b in brokers} == {
        k: v for k, v in manifest["phases"]["cpu_s"].items() if k != "clients"
    }


def test_attach_drives_and_gathers_brokers_started_beforehand(tmp_path: Path) -> None:
    path, study = small_study(tmp_path, "hierarchical")
    trace_dir = tmp_path / "broker-traces"
    net = subprocess.Popen(
        [*HOP, "net", str(path), "--trace-dir", str(trace_dir), "--run-id", "mine"],
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
    )
    try:
        wait_ready(net)
        out = tmp_path / "run"
        done = _hop("replay", str(path), "--out", str(out), "--attach", "--quiet")
        assert done.returncode == 0, done.stderr
        assert "lost 0, unexpected 0" in done.stdout
        assert net.poll() is None  # the brokers are still the user's, still running
    finally:
        stop(net, signal.SIGINT)
    gathered = sorted(p.name.split("-")[1] for p in (out / "traces").glob("hops-*.arrow"))
    assert gathered == sorted(f"broker{b}" for b in study.topology.brokers)
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["deployment"]["attached"] is True
    char = characterize(out)
    assert sorted(char.brokers, key=int) == [str(b) for b in sorted(study.topology.brokers)]


def test_attached_traces_are_copied_once_their_writers_caught_up() -> None:
    """The wait ends when every row a broker had recorded when first asked is written
    or lost (rows recorded after do not hold it up), and reports a writer that fell
    behind."""
    written = {1: [0, 40, 90, 100], 2: [0, 0, 60, 70]}
    lost = {1: 0, 2: 30}
    asked: list[int] = []

    def stats(broker: int) -> dict[str, int]:
        asked.append(broker)
        answer = asked.count(broker) - 1
        return {
            "trace_rows": 100 + 5 * answer,  # it keeps recording while asked
            "trace_rows_written": written[broker][min(answer, 3)],
            "trace_rows_lost": lost[broker],
        }

    assert await_traces_written(stats, [1, 2], max_s=5.0, poll_s=0.01) == {}
    assert asked == [1, 2] * 4  # both caught up at their fourth answer, not before

    stuck = await_traces_written(
        lambda b: {"trace_rows": 50, "trace_rows_written": 20, "trace_rows_lost": 5},
        [3],
        max_s=0.2,
        poll_s=0.01,
    )
    assert stuck == {3: "20 of 50 rows written, 5 lost"}
    with pytest.raises(ReplayError, match="broker 4 does not report how far its trace"):
        await_traces_written(lambda b: {"trace_file": "x"}, [4], max_s=1.0)


@pytest.mark.needs("procfs")
def test_a_client_process_killed_mid_run_is_named_and_nothing_is_left(tmp_path: Path) -> None:
    path, study = small_study(tmp_path, "hierarchical")
    longer = dataclasses.replace(study.workload, duration_s=30.0)
    default = Deployment()  # a process per client
    path.write_text(to_toml(dataclasses.replace(study, workload=longer, deployment=default)))
    out = tmp_path / "run"
    replay = subprocess.Popen(
        [*HOP, "replay", str(path), "--out", str(out), "--quiet"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        deadline = time.monotonic() + 60
        victim = None
        while victim is None and time.monotonic() < deadline:
            time.sleep(0.2)
            drivers = _client_processes(replay.pid)
            if len(drivers) == len(study.publishers) + len(study.subscribers):
                time.sleep(3.0)  # into the run
                victim = drivers[-1]
        assert victim is not None, "the client processes did not start"
        family = descendants(replay.pid)
        os.kill(victim, signal.SIGKILL)
        _, stderr = replay.communicate(timeout=60)
    finally:
        if replay.poll() is None:
            replay.kill()
            replay.wait()
    assert replay.returncode == 1
    assert "client process " in stderr and "on host 127.0.0.1 ended unexpectedly" in stderr
    assert "Traceback" not in stderr, stderr
    left = [pid for pid in family if running(pid)]
    assert not left, f"processes left running: {[cmdline(p) for p in left]}"
    manifest = json.loads((out / "manifest.json").read_text())
    assert "ended unexpectedly" in manifest["error"]
    assert list((out / "traces").glob("hops-*.arrow"))  # what was recorded is kept


def test_a_host_whose_launcher_fails_is_named(tmp_path: Path) -> None:
    path, _ = small_study(tmp_path, "hierarchical")
    away = HostSpec("10.255.255.1", "away", launcher="false {command}")
    deployment = Deployment(hosts={away.address: away}, processes=(ProcessSpec("away", (1,), ()),))
    path = _with_deployment(path, deployment)
    done = _hop("replay", str(path), "--out", str(tmp_path / "run"), "--quiet")
    assert done.returncode == 1
    assert "host away: cannot make the run folder" in done.stderr
    assert "Traceback" not in done.stderr, done.stderr


def _hop(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*HOP, *args], capture_output=True, text=True, timeout=180, check=False)


def _client_processes(replay: int) -> list[int]:
    """The replay's client processes: `python -m monitor.driver`, or (on the replay's
    own host) the children of its fork server, which show the server's command line."""
    family = descendants(replay)
    servers = {p for p in family if "forkserver" in cmdline(p) and parent_of(p) == replay}
    return [p for p in family if "monitor.driver" in cmdline(p) and p not in servers]
