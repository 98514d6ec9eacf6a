"""Brokers forked from a fork server (`broker.forkserver`, `BrokerProcesses(forked=True)`),
as a replay starts them: real brokers on 127.0.0.1 that link, answer with their own
PIDs, take signals, report how they ended and leave nothing running."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import time
from pathlib import Path

import pyarrow as pa
import pytest

from broker.forkserver import (
    ANSWER_TIMEOUT_S,
    BlockingForkServer,
    ForkServerError,
    parse_request,
)
from broker.local_network import Network
from broker.trace.schema import HOPS
from tests.processes import children, cmdline, parent_of, running

pytestmark = pytest.mark.integration


def test_forked_brokers_link_are_signalled_by_pid_restart_and_stop(tmp_path: Path) -> None:
    net = Network.from_file("tree7", tmp_path)
    try:
        net.start()  # each answers `stats` with the PID its owner was told
        procs = net.procs.procs
        pids = {b: p.pid for b, p in procs.items()}
        servers = {parent_of(pid) for pid in pids.values()}
        assert len(servers) == 1 and os.getpid() not in servers
        (server,) = servers
        assert "broker.forkserver broker.cli" in cmdline(server)
        assert all(net.stats(b)["pid"] == pid for b, pid in pids.items())
        assert all(p.poll() is None for p in procs.values())
        with pytest.raises(subprocess.TimeoutExpired):
            procs[1].wait(timeout=0.1)

        net.kill(3)  # SIGKILL, reaped by the server, its code reported
        assert procs[3].returncode == -signal.SIGKILL
        assert not running(pids[3])
        net.restart(3)
        assert procs[3].pid != pids[3] and parent_of(procs[3].pid) == server
        net.wait_linked(brokers=[1, 3])
        pids[3] = procs[3].pid
    finally:
        codes = net.stop()
    assert codes == dict.fromkeys(pids, 0), net.log_text()[-3000:]
    assert not any(running(pid) for pid in [*pids.values(), server])
    assert (tmp_path / "logs" / "broker-forkserver.log").read_text() == ""


def test_a_forked_traced_broker_forks_its_trace_writer(tmp_path: Path) -> None:
    traces = tmp_path / "traces"
    net = Network.from_file(
        "chain5", tmp_path, extra_args=["--trace-dir", str(traces), "--run-id", "t"]
    )
    try:
        net.start()
        for proc in net.procs.procs.values():
            (writer,) = children(proc.pid)
            # forked: the server's command line, not `python -m broker.trace.hop_writer`
            assert "broker.forkserver broker.cli" in cmdline(writer)
    finally:
        codes = net.stop()
    assert codes == dict.fromkeys(range(1, 6), 0), net.log_text()[-3000:]
    log = net.log_text()
    assert log.count('"writer_status": 0') == 5 and "hop_writer" not in log
    files = sorted(traces.rglob("*.arrow"))
    assert len(files) == 5
    assert all(pa.ipc.open_stream(f).read_all().schema.names == HOPS.names for f in files)


def test_a_forked_broker_that_cannot_start_is_told_with_its_log(tmp_path: Path) -> None:
    server = BlockingForkServer.start("broker.cli", tmp_path / "server.log")
    try:
        with (
            open(os.devnull, "rb") as devnull,
            open(tmp_path / "broker.log", "wb") as log,
        ):
            child = server.spawn(
                ["broker", str(tmp_path / "missing.toml"), "--id", "1"],
                devnull.fileno(),
                devnull.fileno(),
                log.fileno(),
            )
        assert child.wait(timeout=20) != 0
        assert child.poll() == child.returncode != 0
        assert "missing.toml" in (tmp_path / "broker.log").read_text()
    finally:
        server.stop()
    assert server.process.returncode == 0
    with pytest.raises(ForkServerError, match="fork server for broker.cli ended"):
        server.spawn([], 0, 1, 2)


def test_a_server_that_cannot_import_its_module_is_named_with_its_log(tmp_path: Path) -> None:
    server = BlockingForkServer.start("no_such_module", tmp_path / "server.log")
    try:
        with pytest.raises(ForkServerError, match="No module named 'no_such_module'"):
            server.spawn([], 0, 1, 2)
    finally:
        server.stop()


@pytest.mark.parametrize(
    ("data", "fds", "problem"),
    [
        (b'{"argv": ["broker"]}', [0, 1], "needs 3 file descriptors, got 2"),
        (b"argv", [0, 1, 2], "must be a JSON object"),
        (b'{"argv": "broker"}', [0, 1, 2], "argv must be a list of strings"),
        (b'{"argv": [1]}', [0, 1, 2], "argv must be a list of strings"),
        (b"[]", [0, 1, 2], "argv must be a list of strings"),
    ],
)
def test_a_malformed_request_is_refused_with_what_is_wrong(
    data: bytes, fds: list[int], problem: str
) -> None:
    with pytest.raises(ValueError, match=problem):
        parse_request(data, fds)


def test_the_server_refuses_a_malformed_request_and_keeps_serving(tmp_path: Path) -> None:
    server = BlockingForkServer.start("broker.cli", tmp_path / "server.log")
    try:
        socket.send_fds(server._control, [b"argv"], [0, 1, 2])
        answer = server._next(time.monotonic() + ANSWER_TIMEOUT_S)
        assert answer == {"error": "a request must be a JSON object, got b'argv'"}
        with open(os.devnull, "rb") as devnull:
            child = server.spawn(["--help"], devnull.fileno(), devnull.fileno(), 2)
        assert child.wait(timeout=20) == 0
    finally:
        server.stop()
    assert server.process.returncode == 0
    assert (tmp_path / "server.log").read_text() == ""


def test_a_request_gives_the_child_its_arguments() -> None:
    assert parse_request(b'{"argv": ["broker", "x.toml"]}', [0, 1, 2]) == ["broker", "x.toml"]
    assert parse_request(b"{}", [0, 1, 2]) == []


def test_brokers_whose_server_died_are_still_stopped_and_the_loss_told(tmp_path: Path) -> None:
    net = Network.from_file("chain5", tmp_path)
    try:
        net.start()
        pids = [p.pid for p in net.procs.procs.values()]
        server = parent_of(pids[0])
        os.kill(server, signal.SIGKILL)  # its children live on, reparented
        net.stats(1)
    finally:
        with pytest.raises(ForkServerError, match="fork server for broker.cli ended"):
            net.stop()
    assert not any(running(pid) for pid in [*pids, server])
