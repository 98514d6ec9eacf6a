"""The `hop` command line: bad input, port conflicts, clean shutdown of `hop net`, and
of a replay or validation interrupted by Ctrl-C or SIGTERM."""

from __future__ import annotations

import argparse
import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import trio

import broker.cli
import client
import hop.cli
from broker.forkserver import CHILDREN_GRACE_S
from broker.local_network import REPO, Network, free_base_port
from broker.probe import fetch_stats
from client.cli import attributes as _attributes
from client.cli import value as _value
from hop.command import HOP, run_hop, sigint_default
from monitor.errors import SparkStartError
from monitor.spark_master import check_reachable, check_spark_start, java_problem
from monitor.traces import read_table
from tests.processes import (
    children,
    cmdline,
    descendants,
    parent_of,
    running,
    running_after,
    wait_for,
)
from topologies.generators import chain, to_toml


def test_bad_topology_file_exits_2_naming_file_and_field(tmp_path: Path) -> None:
    bad = tmp_path / "bad.toml"
    bad.write_text('name = "x"\nbase_port = 7000\n[[brokers]]\nid = 1\nparent = 9\n')
    result = run_hop("broker", str(bad), "--id", "1")
    assert result.returncode == 2
    assert "bad.toml" in result.stderr and "parent" in result.stderr


def test_unknown_broker_id_exits_2(tmp_path: Path) -> None:
    result = run_hop("broker", str(REPO / "topologies" / "chain5.toml"), "--id", "42")
    assert result.returncode == 2 and "no broker with id 42" in result.stderr


@pytest.mark.integration
@pytest.mark.parametrize("stdin", ["closed-at-start", "closed-later"])
def test_hop_broker_stop_on_eof_drains_and_exits_0(tmp_path: Path, stdin: str) -> None:
    """How a replay stops a broker it started on another host: the end of its standard
    input stops it as SIGTERM does, also when the input ends before it listens."""
    topology = chain(1, name="eof", base_port=free_base_port(1))
    file = tmp_path / "eof.toml"
    file.write_text(to_toml(topology))
    start = time.monotonic()
    broker = subprocess.Popen(
        [*HOP, "broker", str(file), "--id", "1", "--stop-on-eof"],
        stdin=subprocess.DEVNULL if stdin == "closed-at-start" else subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        if broker.stdin is not None:
            while "stats" not in _stats_or_empty(topology.address(1)):
                assert time.monotonic() - start < 30 and broker.poll() is None
                time.sleep(0.05)
            broker.stdin.close()
            broker.stdin = None  # (closed: not for communicate to flush)
        _, err = broker.communicate(timeout=30)
    finally:
        if broker.poll() is None:
            broker.kill()
            broker.wait()
    assert broker.returncode == 0, err
    assert "Traceback" not in err, err


def _stats_or_empty(address: tuple[str, int]) -> str:
    try:
        return "stats" if fetch_stats(*address, timeout=1.0) else ""
    except (OSError, TimeoutError):
        return ""


@pytest.mark.parametrize(
    ("command", "said"),
    [
        (["broker", "tree7", "--id", "1", "--trace-dir"], "--trace-dir: cannot make the folder"),
        (["net", "tree7", "--trace-dir"], "--trace-dir: cannot make the folder"),
        (["replay", "tree7", "--out"], "cannot make the folder"),
        (["validate", "tree7", "--quick", "--out"], "--out: cannot make the folder"),
    ],
    ids=["broker", "net", "replay", "validate"],
)
def test_a_folder_option_naming_a_file_exits_2_naming_it(
    tmp_path: Path, command: list[str], said: str
) -> None:
    in_the_way = tmp_path / "a-file"
    in_the_way.write_text("")
    result = run_hop(*command, str(in_the_way))
    assert result.returncode == 2, result.stderr
    assert said in result.stderr and str(in_the_way) in result.stderr, result.stderr


def test_hop_validate_refuses_a_folder_with_files_or_an_unknown_scenario_first(
    tmp_path: Path,
) -> None:
    """Before anything is made: a validation's runs would sit beside what is there."""
    (tmp_path / "used").mkdir()
    (tmp_path / "used" / "manifest.json").write_text("{}")
    result = run_hop("validate", "tree7", "--quick", "--out", str(tmp_path / "used"))
    assert result.returncode == 2 and "holds files already" in result.stderr, result.stderr
    fresh = tmp_path / "fresh"
    result = run_hop("validate", "tree7", "--scenario", "nope", "--out", str(fresh))
    assert result.returncode == 2 and "unknown scenario 'nope'" in result.stderr, result.stderr
    assert not fresh.exists()


@pytest.mark.integration
def test_hop_replay_says_why_a_broker_could_not_start(tmp_path: Path) -> None:
    """The broker's own one line (here: its port taken), not only its exit code; the
    rest is in RUN/logs."""
    base = free_base_port(7)
    study = tmp_path / "t7.toml"
    text = (REPO / "topologies" / "tree7.toml").read_text()
    study.write_text(text.replace("base_port = 7300", f"base_port = {base}"))
    with socket.socket() as blocker:
        blocker.bind(("127.0.0.1", base + 3))
        blocker.listen()
        result = run_hop("replay", str(study), "--out", str(tmp_path / "run"), "--quiet")
    assert result.returncode == 1, result.stderr
    said = f"broker 3: cannot listen on 127.0.0.1:{base + 3}: address already in use"
    assert said in result.stderr.splitlines()[-1], result.stderr


@pytest.mark.parametrize("command", ["analyze", "validate"])
@pytest.mark.parametrize(
    ("master", "said"),
    [
        ("bogus://x", "expected local, local[N], spark://HOST:PORT"),
        ("spark://nohost", "expected spark://HOST:PORT (or several, comma-separated)"),
        ("spark://a:7077,b", "expected spark://HOST:PORT (or several, comma-separated)"),
    ],
)
def test_a_spark_master_of_no_form_spark_takes_exits_2(
    tmp_path: Path, command: str, master: str, said: str
) -> None:
    """Spark itself would refuse it only once its JVM had started, with the JVM's stack."""
    where = ["--out", str(tmp_path / "v")] if command == "validate" else []
    target = "tree7" if command == "validate" else str(tmp_path)
    result = run_hop(command, target, *where, "--master", master)
    assert result.returncode == 2, result.stderr
    assert f"argument --master: {said}" in result.stderr


def test_a_standalone_master_that_takes_no_connection_fails_a_validation_before_its_replays(
    tmp_path: Path,
) -> None:
    """Spark would retry it for a minute, after every replay had run, and then fail with
    a stopped SparkContext's stack."""
    with socket.socket() as bound, socket.socket() as listening:
        bound.bind(("127.0.0.1", 0))  # bound, not listening: connections are refused
        listening.bind(("127.0.0.1", 0))
        listening.listen()
        refused = bound.getsockname()[1]
        master = f"spark://127.0.0.1:{refused},127.0.0.1:{refused}"
        run = tmp_path / "v"
        result = run_hop("validate", "tree7", "--quick", "--out", str(run), "--master", master)
        assert result.returncode == 1, result.stderr
        assert result.stderr.splitlines() == [
            f"hop validate: Spark could not start with master {master}: cannot connect to "
            f"127.0.0.1:{refused}: connection refused; 127.0.0.1:{refused}: connection "
            "refused (is a Spark master running there?)"
        ]
        assert not run.exists()
        check_reachable(f"spark://127.0.0.1:{refused},127.0.0.1:{listening.getsockname()[1]}")
        check_reachable("local[2]")


@pytest.mark.parametrize(
    ("version", "said"),
    [
        ('openjdk version "17.0.15"', None),
        ('openjdk version "21"', None),
        ('openjdk version "11.0.2"', "is Java 11"),
        ('java version "1.8.0_292"', "is Java 8"),
        (None, "JAVA_HOME ({home}) holds no bin/java"),
    ],
    ids=["17", "21", "11", "8", "none"],
)
def test_the_java_spark_would_launch_is_checked_first(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, version: str | None, said: str | None
) -> None:
    """Spark would say only that its gateway exited, or print a page of
    UnsupportedClassVersionError; `hop validate` would have run its replays first."""
    home = tmp_path / "jdk"
    if version is not None:
        (home / "bin").mkdir(parents=True)
        java = home / "bin" / "java"
        java.write_text(f"#!/bin/sh\necho '{version}' >&2\n")
        java.chmod(0o755)
    monkeypatch.setenv("JAVA_HOME", str(home))
    if said is None:
        assert java_problem() is None
        return
    problem = java_problem()
    assert problem is not None and said.format(home=home) in problem
    assert problem.startswith("it needs Java 17 or later, and ")
    with pytest.raises(SparkStartError, match="^Spark cannot start: it needs Java 17"):
        check_spark_start("local[2]")


def test_no_java_on_the_path_is_named(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("JAVA_HOME", raising=False)
    monkeypatch.setenv("PATH", str(tmp_path))
    assert java_problem() == "it needs Java 17 or later, and no java on the PATH"


@pytest.mark.needs("java")
def test_spark_that_cannot_start_is_named_with_its_reason() -> None:
    """A master of the right form that Spark cannot use: SparkStartError (hop exits 1
    with it as its one line) naming the master and the Java exception's own words."""
    code = (
        "from monitor.errors import SparkStartError\n"
        "from monitor.spark import spark_session\n"
        "try:\n"
        "    spark_session('local[0]')\n"
        "except SparkStartError as exc:\n"
        "    print(exc)\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=120, cwd=REPO
    )
    assert done.stdout.strip() == (
        "Spark could not start with master local[0]: "
        "org.apache.spark.SparkException: Asked to run locally with 0 threads"
    ), done.stderr[-2000:]


def test_bad_filter_in_hop_sub_exits_2() -> None:
    result = run_hop("sub", "127.0.0.1:1", "family = = 3")
    assert result.returncode == 2 and "column" in result.stderr


def test_bad_address_exits_2() -> None:
    assert run_hop("stats", "nowhere").returncode == 2


@pytest.mark.parametrize("command", ["analyze", "predict"])
@pytest.mark.parametrize("manifest", [None, "{}", "not json"])
def test_a_folder_that_is_not_a_run_exits_2_naming_the_manifest(
    tmp_path: Path, command: str, manifest: str | None
) -> None:
    if manifest is not None:
        (tmp_path / "manifest.json").write_text(manifest)
    result = run_hop(command, str(tmp_path))
    assert result.returncode == 2, result.stderr
    assert f"{tmp_path / 'manifest.json'}: " in result.stderr


PHASES = {"measure_start_ns": 10**9, "measure_end_ns": 3 * 10**9}


@pytest.mark.parametrize(
    ("command", "manifest", "said"),
    [
        ("report", b"", "unreadable (Expecting value"),
        ("report", b"not json", "unreadable (Expecting value"),
        ("report", b"\xff\xfe\x00", "unreadable ('utf-8' codec can't decode"),
        ("report", b"[1, 2]", "not a JSON object (got [1, 2])"),
        ("report", b"null", "not a JSON object (got null)"),
        ("report", b'{"case_study": 5}', "case_study must be a table (a JSON object), got 5"),
        (
            "predict",
            json.dumps({"phases": {**PHASES, "measure_start_ns": "soon"}}).encode(),
            'phases.measure_start_ns must be a whole number of nanoseconds, got "soon"',
        ),
        (
            "predict",
            json.dumps({"phases": {**PHASES, "cpu_s": "x"}, "host": {"cores": 2}}).encode(),
            'phases.cpu_s must be a table (a JSON object), got "x"',
        ),
        (
            "predict",
            json.dumps(
                {"phases": {**PHASES, "measure_end_ns": 10**9}, "host": {"cores": 2}}
            ).encode(),
            "phases.measure_end_ns (1000000000) is not after phases.measure_start_ns",
        ),
    ],
)
def test_a_manifest_hop_cannot_use_exits_2_naming_the_file_and_field(
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    command: str,
    manifest: bytes,
    said: str,
) -> None:
    """Refused before anything is computed from it: one line, no traceback."""
    (tmp_path / "manifest.json").write_bytes(manifest)
    assert hop.cli.main([command, str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"hop {command}: {tmp_path / 'manifest.json'}: {said}"), err
    assert len(err.splitlines()) == 1, err  # no traceback


def test_hop_analyze_tells_what_it_could_not_read_on_stderr(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """The summary goes to stdout as JSON; its problems and warnings are also said on
    stderr, where a user sees them (an analysis that read only part of a trace file
    still writes its tables)."""
    summary = {
        "problems": ["hops-broker3-910.arrow: truncated after 100 rows (...); rows kept"],
        "warnings": ["class (callForOffers, pub1) at broker 3: solved visit ratio ..."],
    }
    monkeypatch.setattr(
        "monitor.analysis.analyze", lambda run_dir, master, window, progress, out: summary
    )
    assert hop.cli.main(["analyze", str(tmp_path)]) == 0
    out, err = capsys.readouterr()
    assert json.loads(out) == summary
    assert err.splitlines() == [
        f"hop analyze: problem: {summary['problems'][0]}",
        f"hop analyze: warning: {summary['warnings'][0]}",
    ]


def test_attribute_values_from_the_command_line() -> None:
    assert _value("7") == 7 and _value("7.5") == 7.5 and _value("true") is True
    assert _value('"7"') == "7" and _value("EU") == "EU"
    assert _attributes(["family=7", "region=EU"]) == {"family": 7, "region": "EU"}


@pytest.mark.integration
def test_hop_net_reports_a_taken_port(tmp_path: Path) -> None:
    net = Network.from_file("chain5", tmp_path)
    host, port = net.address(3)
    with socket.socket() as blocker:
        blocker.bind((host, port))
        blocker.listen()
        result = run_hop("net", str(net.file))
    assert result.returncode == 1
    # The broker's own one-line message, then hop net's: no traceback, no "bug".
    said = f"hop broker: broker 3: cannot listen on {host}:{port}: address already in use\n"
    assert said in result.stderr, result.stderr
    assert "Traceback" not in result.stderr and "internal error" not in result.stderr, result.stderr


def broker_pids(addresses: list[tuple[str, int]], timeout: float) -> list[int]:
    """The PIDs of the brokers at `addresses`, once every one answers (within `timeout`)."""
    deadline = time.monotonic() + timeout
    pids: list[int] = []
    while time.monotonic() < deadline and len(pids) < len(addresses):
        try:
            pids = [fetch_stats(*address, timeout=1)["pid"] for address in addresses]
        except OSError:
            time.sleep(0.1)
    assert len(pids) == len(addresses)
    return pids


def killed_by_pid(proc: subprocess.Popen[str], pids: Iterable[int]) -> None:
    """What a test started and left running, killed by PID: the command `proc` (reaped)
    and the processes `pids` it started."""
    if proc.poll() is None:
        proc.kill()
        proc.wait()
    for pid in pids:
        if running(pid):
            os.kill(pid, signal.SIGKILL)


def stopped_by_sigterm(
    args: list[str], addresses: list[tuple[str, int]], timeout: float = 30
) -> int:
    """Run `hop ARGS`, wait until every broker at `addresses` answers, SIGTERM the
    command; return its exit code once no broker process it started is left."""
    proc = subprocess.Popen(
        [*HOP, *args], cwd=REPO, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
    )
    try:
        pids = broker_pids(addresses, timeout)
        proc.send_signal(signal.SIGTERM)
        code = proc.wait(timeout=20)
        for pid in pids:  # every broker process is gone
            with pytest.raises(ProcessLookupError):
                os.kill(pid, 0)
        return code
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


@pytest.mark.integration
def test_hop_net_stops_every_broker_on_sigterm(tmp_path: Path) -> None:
    net = Network.from_file("chain5", tmp_path)
    addresses = [net.address(b) for b in range(1, 6)]
    assert stopped_by_sigterm(["net", str(net.file)], addresses) == 0


def hop_net(
    net: Network, *args: str, stderr: int = subprocess.DEVNULL, terminal_job: bool = False
) -> subprocess.Popen[str]:
    """`hop net` of `net`'s file, `args` added; with `terminal_job`, in a process group
    of its own, as a terminal's job is, for the test to signal as the terminal would."""
    return subprocess.Popen(
        [*HOP, "net", str(net.file), *args],
        cwd=REPO,
        stdout=subprocess.DEVNULL,
        stderr=stderr,
        text=True,
        start_new_session=terminal_job,
    )


@pytest.mark.integration
def test_a_hangup_stops_hop_net_and_its_brokers_cleanly_with_their_traces_complete(
    tmp_path: Path,
) -> None:
    """As when the terminal of `hop net --trace-dir` closes: SIGHUP reaches its whole
    process group, brokers, trace writers and the fork server too. Every process ends,
    `hop net` with 0, and every event routed is in the traces (by default a hangup ended
    them all at once and left the trace files empty)."""
    net = Network.from_file("chain5", tmp_path)
    addresses = [net.address(b) for b in range(1, 6)]
    traces = tmp_path / "traces"
    proc = hop_net(net, "--trace-dir", str(traces), terminal_job=True)
    pids: list[int] = []
    try:
        pids = broker_pids(addresses, 30)
        wait_for(
            lambda: all(fetch_stats(*a)["parent_connected"] for a in addresses[1:]),
            "the line linked",
        )
        with client.Client.connect(*net.address(5), name="pub") as publisher:
            publisher.publish_many({"n": n} for n in range(50))
            publisher.flush()
        wait_for(
            lambda: fetch_stats(*net.address(1))["events_routed"] >= 50, "the events at the root"
        )
        os.killpg(proc.pid, signal.SIGHUP)
        assert proc.wait(timeout=30) == 0
        assert running_after(pids, 5.0) == []
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    rows = read_table(traces, "hops")
    assert rows.problems == []
    assert Counter(rows.table.column("broker").to_pylist()) == {str(b): 50 for b in range(1, 6)}


@pytest.mark.integration
def test_a_hangup_while_hop_net_starts_ends_it_as_asked_not_as_a_failure(tmp_path: Path) -> None:
    """The terminal closed while the brokers start and link: they end as told, and
    `hop net` with them, with 0, not with "broker N exited with code 0"."""
    net = Network.from_file("chain5", tmp_path)
    proc = hop_net(net, stderr=subprocess.PIPE, terminal_job=True)
    try:
        (root,) = broker_pids([net.address(1)], 30)  # the others still starting or linking
        os.killpg(proc.pid, signal.SIGHUP)
        _, err = proc.communicate(timeout=30)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    assert proc.returncode == 0, err
    assert "exited with code" not in err
    assert running_after([root], 5.0) == []


@pytest.mark.integration
def test_brokers_outlive_a_killed_hop_net_by_the_fork_servers_grace_only(tmp_path: Path) -> None:
    """`hop net` forks its brokers from a fork server: SIGKILLed, it cannot stop them,
    but its end ends the server's socket, and the server stops them after its grace."""
    net = Network.from_file("chain5", tmp_path)
    addresses = [net.address(b) for b in range(1, 6)]
    proc = hop_net(net)
    pids: list[int] = []
    try:
        pids = broker_pids(addresses, 30)
        server = parent_of(pids[0])
        assert server is not None and parent_of(server) == proc.pid
        proc.kill()
        proc.wait()
        assert running_after(pids, 5.0) == pids  # within the grace, they serve on
        assert running_after([*pids, server], CHILDREN_GRACE_S + 10) == []
    finally:
        for pid in pids:
            if running(pid):
                os.kill(pid, signal.SIGKILL)


def test_hop_net_refuses_a_topology_with_brokers_on_other_hosts(tmp_path: Path) -> None:
    """It runs every broker here; a broker elsewhere is started there (`hop broker`) or
    by a replay. Refused before anything starts: no launcher, no traffic."""
    text = (REPO / "topologies" / "tree7.toml").read_text()
    moved = text.replace("[[brokers]]\nid = 3\n", '[[brokers]]\nid = 3\nhost = "10.9.9.9"\n', 1)
    assert moved != text
    file = tmp_path / "spread.toml"
    file.write_text(moved)
    result = run_hop("net", str(file))
    assert result.returncode == 2, result.stderr
    assert "broker 3's host 10.9.9.9 is not this one" in result.stderr, result.stderr


@pytest.mark.integration
def test_hop_net_whose_fork_server_is_killed_says_so_and_stops_its_brokers(
    tmp_path: Path,
) -> None:
    """Its brokers' exit codes go with the server: `hop net` cannot watch them any more,
    so it says so in one line, stops them by PID and exits 1."""
    net = Network.from_file("chain5", tmp_path)
    addresses = [net.address(b) for b in range(1, 6)]
    proc = hop_net(net, stderr=subprocess.PIPE)
    pids: list[int] = []
    try:
        pids = broker_pids(addresses, 30)
        server = parent_of(pids[0])
        assert server is not None and parent_of(server) == proc.pid
        os.kill(server, signal.SIGKILL)
        _, err = proc.communicate(timeout=30)
        assert proc.returncode == 1, err
        said = "hop net: the fork server for broker.cli ended, killed by SIGKILL"
        assert said in err and "Traceback" not in err, err
        assert running_after(pids, 5.0) == []
    finally:
        killed_by_pid(proc, pids)


@pytest.mark.integration
def test_hop_replay_stops_its_brokers_on_sigterm(tmp_path: Path) -> None:
    from tests.test_replay import small_study

    path, study = small_study(tmp_path, "hierarchical")
    addresses = [study.topology.address(b) for b in sorted(study.topology.brokers)]
    args = ["replay", str(path), "--out", str(tmp_path / "run"), "--duration", "60", "--quiet"]
    assert stopped_by_sigterm(args, addresses) != 0


@pytest.mark.parametrize(
    ("options", "message"),
    [
        (["--calibration-fractions", "0.3", "1.5"], "calibration fractions must be in (0, 1]"),
        (["--calibration-repeats", "0"], "calibration repeats must be at least 1"),
        (["--calibration-fractions", "0.3", "--calibration-repeats", "2"], "give two"),
        (["--repeats", "0"], "repeats must be at least 1"),
        (["--disturbed-retries", "-1"], "disturbed retries must be 0 or more"),
        (["--trend", "curve"], "unknown trend 'curve'"),
    ],
)
def test_hop_validate_refuses_bad_calibrations(
    tmp_path: Path, options: list[str], message: str
) -> None:
    study = REPO / "topologies" / "tree7.toml"
    result = run_hop("validate", str(study), "--out", str(tmp_path / "run"), *options)
    assert result.returncode == 2 and message in result.stderr, result.stderr
    assert not (tmp_path / "run" / "calibration").exists()


def _raising(error: BaseException) -> broker.cli.Layer:
    """A layer whose one command, `hop fail`, raises `error`."""

    def fail(args: argparse.Namespace) -> int:
        raise error

    def register(commands: Any, common: argparse.ArgumentParser) -> None:
        commands.add_parser("fail", parents=[common]).set_defaults(func=fail)

    return broker.cli.Layer(register)


def _hop_fail(error: BaseException) -> int:
    """`hop fail` in this process, its command raising `error`; its exit code."""
    layer = _raising(error)
    parser = broker.cli.build("hop", "test", [layer])
    try:
        return broker.cli.run(parser, [layer], ["fail"])
    except KeyboardInterrupt as exc:  # (let out, it would stop the whole test session)
        pytest.fail(f"hop let {exc!r} out")
    except BaseExceptionGroup as exc:
        pytest.fail(f"hop let {exc!r} out")


def test_an_error_whose_text_spans_lines_is_said_in_one(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """A message may quote what a peer sent (a broker's Error text): still one line."""
    raising = _raising(OSError("refused:\nsecond line\n"))
    layer = broker.cli.Layer(raising.register, failures=(OSError,))
    parser = broker.cli.build("hop", "test", [layer])
    assert broker.cli.run(parser, [layer], ["fail"]) == 1
    assert capsys.readouterr().err == "hop fail: refused: | second line\n"


def _from_nested_nurseries() -> BaseException:
    """What a KeyboardInterrupt raised in a nursery nested in another comes out of
    `trio.run` as."""

    async def main() -> None:
        async with trio.open_nursery() as outer:
            outer.start_soon(trio.sleep_forever)
            async with trio.open_nursery() as inner:
                inner.start_soon(trio.sleep_forever)
                await trio.sleep(0.01)
                raise KeyboardInterrupt

    try:
        trio.run(main)
    except BaseException as exc:
        return exc
    raise AssertionError("trio.run returned")


@pytest.mark.parametrize(
    "make_error",
    [
        KeyboardInterrupt,
        lambda: BaseExceptionGroup("g", [BaseExceptionGroup("h", [KeyboardInterrupt()])]),
        lambda: BaseExceptionGroup("g", [trio.Cancelled._create(), KeyboardInterrupt()]),
        lambda: BaseExceptionGroup("g", [KeyboardInterrupt(), RuntimeError("died of it")]),
        _from_nested_nurseries,
    ],
    ids=["alone", "nested", "beside-cancelled", "beside-an-error", "from-trio"],
)
def test_an_interrupted_command_says_so_in_one_line_and_exits_130(
    make_error: Callable[[], BaseException], capsys: pytest.CaptureFixture[str]
) -> None:
    """Whatever else failed beside the interrupt is its consequence: not told."""
    assert _hop_fail(make_error()) == 130
    assert capsys.readouterr().err == "hop fail: interrupted\n"


INTERRUPTED_WHILE_IMPORTING = """
import sys
import hop

class CtrlC:  # a Ctrl-C that arrives while the command line imports broker.cli
    def find_spec(self, name, path, target=None):
        if name == "broker.cli":
            raise KeyboardInterrupt

sys.meta_path.insert(0, CtrlC())
sys.exit(hop.main())
"""


def test_a_ctrl_c_while_hop_imports_its_commands_is_one_line_too() -> None:
    ended = subprocess.run(
        [sys.executable, "-c", INTERRUPTED_WHILE_IMPORTING],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=REPO,
        check=False,
    )
    assert (ended.returncode, ended.stderr) == (130, "hop: interrupted\n")


def test_other_base_exceptions_pass_through_the_command_line() -> None:
    with pytest.raises(SystemExit):
        _hop_fail(SystemExit(3))


@dataclass
class Interrupted:
    """How a command that was sent a signal ended."""

    code: int
    stderr: str
    started: list[int]  # every process it started, seen while it ran
    left: list[int]  # those still running after it ended


def _delivering(out: Path) -> bool:
    """Whether a replay writing into `out` (or a validation's first replay) is in its
    traffic phase: a subscriber's deliveries trace holds rows."""
    try:
        return any(f.stat().st_size > 0 for f in out.rglob("deliveries-*.arrow"))
    except OSError:  # (a file seen, then gone)
        return False


def interrupted_in_traffic(
    args: list[str], out: Path, sig: int, sigint_ignored: bool = False
) -> Interrupted:
    """Run `hop ARGS` (a replay or validation writing into `out`), send it `sig` once
    events are delivered; see `interrupted_when`."""
    return interrupted_when(
        args, lambda proc: _delivering(out), sig, "events delivered", sigint_ignored
    )


def _ignore_sigint() -> None:
    sigint_default()  # then ignored, as a shell without job control starts a background job
    signal.signal(signal.SIGINT, signal.SIG_IGN)


READY_BOUND_S = 120
"""How long `interrupted_when` waits for its moment: a bound for a command that never
gets there, not a timing. Alone, an analysis launches Spark within seconds; beside a
validation in the other worker of `make test`, on 2 cores, it once took over 60 s."""


def interrupted_when(
    args: list[str],
    ready: Callable[[subprocess.Popen[str]], bool],
    sig: int,
    moment: str,
    sigint_ignored: bool = False,
) -> Interrupted:
    """Run `hop ARGS`, send it `sig` by its PID as soon as `ready(proc)` (the `moment`,
    within `READY_BOUND_S`), and wait for its end. Whatever it left running is killed, by PID, once
    noted. With `sigint_ignored` the command inherits SIGINT ignored, as a background job
    of a shell without job control does, and is sent a SIGINT first, which must leave
    it running."""
    with tempfile.TemporaryFile("w+") as stderr:  # (a file: no pipe to keep reading)
        proc = subprocess.Popen(
            [*HOP, *args],
            cwd=REPO,
            stdout=subprocess.DEVNULL,
            stderr=stderr,
            text=True,
            preexec_fn=_ignore_sigint if sigint_ignored else sigint_default,
        )
        started: set[int] = set()
        left: list[int] = []
        try:
            deadline = time.monotonic() + READY_BOUND_S
            while not ready(proc) and proc.poll() is None and time.monotonic() < deadline:
                started.update(descendants(proc.pid))
                time.sleep(0.02)
            started.update(descendants(proc.pid))
            if proc.poll() is not None or not ready(proc):
                stderr.seek(0)
                said = stderr.read()[-3000:]
                raise AssertionError(f"not {moment} in {READY_BOUND_S} s; it said:\n{said}")
            if sigint_ignored:
                proc.send_signal(signal.SIGINT)
                time.sleep(1.0)
                assert proc.poll() is None, "an ignored SIGINT ended the command"
            proc.send_signal(sig)
            code = proc.wait(timeout=60)
            left = running_after(sorted(started), 10.0)
        finally:
            killed_by_pid(proc, started)
        stderr.seek(0)
        return Interrupted(code, stderr.read(), sorted(started), left)


@pytest.mark.integration
@pytest.mark.needs("procfs")
@pytest.mark.parametrize(
    ("command", "sig", "code", "said", "sigint_ignored"),
    [
        ("replay", signal.SIGINT, 130, "hop replay: interrupted", False),
        ("replay", signal.SIGTERM, 143, "hop replay: interrupted (SIGTERM)", False),
        ("replay", signal.SIGTERM, 143, "hop replay: interrupted (SIGTERM)", True),
        ("replay", signal.SIGHUP, 129, "hop replay: interrupted (SIGHUP)", False),
        ("validate", signal.SIGINT, 130, "hop validate: interrupted", False),
        ("validate", signal.SIGTERM, 143, "hop validate: interrupted (SIGTERM)", False),
    ],
    ids=[
        "replay-SIGINT",
        "replay-SIGTERM",
        "replay-SIGTERM-in-background",
        "replay-SIGHUP",
        "validate-SIGINT",
        "validate-SIGTERM",
    ],
)
def test_an_interrupted_replay_stops_what_it_started_and_says_so_in_one_line(
    tmp_path: Path, command: str, sig: int, code: int, said: str, sigint_ignored: bool
) -> None:
    """Ctrl-C or SIGTERM in the middle of the traffic: the brokers, their trace writers,
    the client processes and both fork servers are stopped before `hop` says so. In the
    background of a shell without job control, SIGINT is ignored, and SIGTERM unwinds
    the replay all the same (no abandoned trio run reported as "Exception ignored")."""
    from tests.test_replay import small_study

    path, study = small_study(tmp_path, "hierarchical")
    out = tmp_path / "run"
    args = [command, str(path), "--out", str(out), "--duration", "3", "--warmup", "1", "--quiet"]
    ended = interrupted_in_traffic(args, out, sig, sigint_ignored)
    assert "Traceback" not in ended.stderr, ended.stderr
    assert "Exception ignored" not in ended.stderr, ended.stderr
    assert ended.stderr.splitlines() == [said]
    assert ended.code == code
    # brokers and their writers, a client process per home broker, two fork servers
    assert len(ended.started) >= 2 * len(study.topology.brokers) + 2
    assert ended.left == [], [cmdline(pid) for pid in ended.left]


@pytest.mark.integration
@pytest.mark.needs("procfs", "java")
@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM], ids=["SIGINT", "SIGTERM"])
@pytest.mark.parametrize("moment", ["launching", "writing"])
def test_an_interrupted_analysis_stops_its_jvm_and_says_so_in_one_line(
    tmp_path: Path, sig: int, moment: str
) -> None:
    """Ctrl-C or SIGTERM while Spark's JVM launches (PySpark's wait for its port, which
    an interrupt used to end leaving the JVM running for good) or while its jobs write
    the tables (PySpark's own handler called the JVM from inside the signal handler,
    breaking the connection: py4j tracebacks, and an internal error)."""
    from tests.test_analysis import EVENTS, write_run

    run = write_run(tmp_path / "run", EVENTS)
    if moment == "launching":  # PySpark's launcher of the JVM has started

        def ready(proc: subprocess.Popen[str]) -> bool:
            return any("pyspark" in cmdline(child) for child in children(proc.pid))
    else:

        def ready(proc: subprocess.Popen[str]) -> bool:
            return (run / "analysis" / "routing_probabilities.parquet").exists()

    ended = interrupted_when(["analyze", str(run)], ready, sig, moment)
    said = "hop analyze: interrupted" + (" (SIGTERM)" if sig == signal.SIGTERM else "")
    lines = ended.stderr.splitlines()
    assert lines[-1:] == [said], ended.stderr
    # before it, the command's progress lines and the JVM's notice of the modules Spark
    # asks it for
    assert "Traceback" not in ended.stderr, ended.stderr
    progress = [line for line in lines[:-1] if line.startswith("hop analyze: ")]
    notices = [line for line in lines[:-1] if line.startswith("WARNING: Using incubator")]
    assert len(progress) + len(notices) == len(lines) - 1, ended.stderr
    assert progress[0].startswith("hop analyze: staged "), ended.stderr
    assert progress[1] == "hop analyze: starting Spark (local[*])", ended.stderr
    assert ended.code == 128 + sig
    assert ended.started, "no JVM was started"
    assert ended.left == [], [cmdline(pid) for pid in ended.left]


@pytest.mark.needs("procfs")
@pytest.mark.parametrize(
    ("before", "sigint", "blocked"),
    [
        ("", "default_int_handler", True),
        ("threading.Thread(target=time.sleep, args=(5,), daemon=True).start()", "1", False),
    ],  # (SIG_IGN is 1)
    ids=["one-thread", "a-thread-started-before"],
)
def test_an_ignored_sigint_is_blocked_only_while_one_thread_runs(
    before: str, sigint: str, blocked: bool
) -> None:
    """Blocked, SIGINT stays away and trio can lend its handler to SIGTERM; but a thread
    started before (as numpy's and pyarrow's at import) would keep SIGINT unblocked and
    take it, so then it stays ignored."""
    code = (
        f"import signal, threading, time\n{before}\n"
        "from broker.process import unwind_on_termination\n"
        "signal.signal(signal.SIGINT, signal.SIG_IGN)\n"
        "unwind_on_termination()\n"
        "handler = signal.getsignal(signal.SIGINT)\n"
        "print(int(handler) if isinstance(handler, int) else handler.__name__)\n"
        "print(signal.SIGINT in signal.pthread_sigmask(signal.SIG_BLOCK, []))\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=60, cwd=REPO
    )
    assert done.stdout.split() == [sigint, str(blocked)], done.stderr


def test_every_argument_of_every_command_says_what_it_is_in_help() -> None:
    parser = hop.cli.build_parser()
    (commands,) = (a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    unexplained = [
        f"hop {name} {action.option_strings or action.dest}"
        for name, command in commands.choices.items()
        for action in command._actions
        if not action.help and not isinstance(action, argparse._HelpAction)
    ]
    assert len(commands.choices) == 11
    assert unexplained == []
