"""The fork server that starts a replay's local client processes (`monitor.forkserver`):
its children are `python -m monitor.driver` on the pipes their owner made, report
their exit codes, take signals, and never outlive the server."""

from __future__ import annotations

import json
import signal
from pathlib import Path

import pytest
import trio

from monitor.forkserver import ForkedProcess, ForkServer, ForkServerError
from tests.processes import parent_of, running


async def _line(process: ForkedProcess) -> dict[str, object]:
    data = b""
    while not data.endswith(b"\n"):
        chunk = await process.stdout.receive_some(4096)
        assert chunk, "the child closed its output"
        data += chunk
    return json.loads(data)


@pytest.mark.trio
async def test_children_run_the_module_on_their_own_pipes_and_report_how_they_ended(
    tmp_path: Path,
) -> None:
    server = await ForkServer.start("monitor.driver", tmp_path / "server.log")
    try:
        children = [await server.spawn(tmp_path / f"child{n}.log") for n in range(3)]
        pids = {child.pid for child in children}
        assert len(pids) == 3 and server.process.pid not in pids
        assert all(parent_of(pid) == server.process.pid for pid in pids)
        assert [child.poll() for child in children] == [None, None, None]

        # A driver whose input ends before its plan exits 0.
        await children[0].stdin.aclose()
        with trio.fail_after(10):
            assert await children[0].wait() == 0
        # Signals reach it by its PID.
        children[1].send_signal(signal.SIGTERM)
        with trio.fail_after(10):
            assert await children[1].wait() == -signal.SIGTERM
        # Its standard error is its own log: a plan that is not JSON fails it there.
        await children[2].stdin.send_all(b"no plan\n")
        with trio.fail_after(10):
            assert await children[2].wait() == 1
        assert "JSONDecodeError" in (tmp_path / "child2.log").read_text()
        assert (tmp_path / "child0.log").read_text() == ""
        assert [child.poll() for child in children] == [0, -signal.SIGTERM, 1]
    finally:
        await server.stop()
    assert server.process.returncode == 0
    assert not any(running(pid) for pid in pids)


@pytest.mark.trio
async def test_a_signal_sent_as_soon_as_the_pid_is_told_ends_the_child(tmp_path: Path) -> None:
    """The server keeps SIGINT and SIGTERM from itself by blocking them, so a child that
    has not yet set its own handlers holds such a signal until it has, instead of
    dropping it as an ignored signal would be."""
    server = await ForkServer.start("monitor.driver", tmp_path / "server.log")
    children: list[ForkedProcess] = []
    try:
        for n in range(8):
            child = await server.spawn(tmp_path / f"child{n}.log")
            child.send_signal(signal.SIGTERM if n % 2 else signal.SIGINT)
            children.append(child)
        with trio.fail_after(30):
            codes = [await child.wait() for child in children]
    finally:
        for child in children:
            await child.stdin.aclose()
        await server.stop()
    # SIGINT raises KeyboardInterrupt in the child, which ends with the traceback: 1.
    assert codes == [1, -signal.SIGTERM] * 4
    assert "KeyboardInterrupt" in (tmp_path / "child0.log").read_text()


@pytest.mark.trio
async def test_a_child_answers_on_its_standard_output(tmp_path: Path) -> None:
    """The JSON-lines exchange a replay has with each driver, through the pipes."""
    server = await ForkServer.start("monitor.driver", tmp_path / "server.log")
    try:
        child = await server.spawn(tmp_path / "child.log")
        study = Path(__file__).parent.parent / "topologies" / "tree7.toml"
        plan = {
            "name": "clients-1",
            "study_file": str(study),
            "trace_dir": str(tmp_path),
            "run_id": "forked",
            "workload": {},
            "rates": {},
        }
        await child.stdin.send_all((json.dumps(plan) + "\n").encode())
        with trio.fail_after(20):
            assert await _line(child) == {"ready": child.pid}
        await child.stdin.send_all(b'{"ping": 7}\n')
        with trio.fail_after(10):
            pong = await _line(child)
        assert pong["pong"] == 7
        await child.stdin.aclose()
        with trio.fail_after(10):
            assert await child.wait() == 0
    finally:
        await server.stop()


@pytest.mark.trio
async def test_the_server_ends_the_children_left_after_its_grace(tmp_path: Path) -> None:
    server = await ForkServer.start("monitor.driver", tmp_path / "server.log", grace_s=0.5)
    child = await server.spawn(tmp_path / "child.log")
    # The owner keeps the child's input open and stops the server: the server waits its
    # grace, then ends the child with SIGTERM, and then ends itself.
    with trio.fail_after(15):
        await server.stop()
    assert server.process.returncode == 0
    assert not running(child.pid)
    await child.stdin.aclose()


@pytest.mark.trio
async def test_a_server_that_cannot_import_its_module_is_named_with_its_log(
    tmp_path: Path,
) -> None:
    server = await ForkServer.start("monitor.no_such_module", tmp_path / "server.log")
    try:
        with trio.fail_after(20), pytest.raises(ForkServerError) as raised:
            await server.spawn(tmp_path / "child.log")
    finally:
        await server.stop()
    message = str(raised.value)
    assert "monitor.no_such_module" in message
    assert "ModuleNotFoundError" in message
    assert str(tmp_path / "server.log") in message
