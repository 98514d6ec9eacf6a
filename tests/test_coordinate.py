"""How a replay's coordinator starts its client processes and reads their messages
(`monitor.coordinate`), without starting any."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import trio

from monitor.coordinate import ClientProcessError, Coordinator, Started
from monitor.placement import ClientProcess
from topologies import Deployment, HostSpec


class _Ended:
    """What the coordinator asks of a process that has ended."""

    pid = 4242

    async def wait(self) -> int:
        return 3

    def poll(self) -> int:
        return 3


def _coordinator(tmp_path: Path, names: list[str], deployment: Deployment) -> Coordinator:
    specs = [ClientProcess(name, HostSpec("127.0.0.1"), (), ()) for name in names]
    coordinator = Coordinator(specs, deployment, lambda spec: None, tmp_path, quiet=True)  # type: ignore[arg-type, return-value]
    for spec in specs:
        log = tmp_path / f"{spec.name}.log"
        log.write_text("last words\n")
        coordinator.started[spec.name] = Started(spec, _Ended(), log)  # type: ignore[arg-type]
    return coordinator


def _feed(coordinator: Coordinator, messages: list[tuple[str, Any]]) -> None:
    for message in messages:
        coordinator._inbox_send.send_nowait(message)


@pytest.mark.trio
async def test_a_process_may_end_as_soon_as_it_said_it_is_done(tmp_path: Path) -> None:
    """A forked driver exits at once after its last line: the end of its output can
    come before the other processes' last lines, and is no error."""
    coordinator = _coordinator(tmp_path, ["a", "b"], Deployment())
    done = {"done": {"delivered": 5, "cpu_s_drain": 0.1}}
    _feed(coordinator, [("a", done), ("a", None), ("b", done)])
    with trio.fail_after(5):
        await coordinator._wait_all("done", 5.0)
    assert coordinator.started["a"].delivered == 5


@pytest.mark.trio
async def test_a_process_that_ends_before_it_is_done_is_named(tmp_path: Path) -> None:
    coordinator = _coordinator(tmp_path, ["a", "b"], Deployment())
    _feed(coordinator, [("b", {"published": 3, "cpu_s": {}}), ("a", None)])
    with trio.fail_after(5), pytest.raises(ClientProcessError) as raised:
        await coordinator._wait_all("published", 5.0)
    message = str(raised.value)
    assert "client process a on host 127.0.0.1 ended unexpectedly (exit code 3" in message
    assert "last words" in message


def test_processes_here_are_forked_and_the_others_started_by_their_launcher(
    tmp_path: Path,
) -> None:
    coordinator = _coordinator(tmp_path, [], Deployment())
    here = ClientProcess("here", HostSpec("127.0.0.1"), (), ())
    there = ClientProcess("there", HostSpec("10.0.0.2"), (), ())
    in_namespace = ClientProcess(
        "ns", HostSpec("10.0.0.3", launcher="ip netns exec h3 {command}"), (), ()
    )
    assert coordinator._forked(here)
    assert not coordinator._forked(there)
    assert not coordinator._forked(in_namespace)
