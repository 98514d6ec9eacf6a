"""The asyncio event loops the asyncio client is tested on: asyncio's own and uvloop
(what gmqtt users often run), each test run on both."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import TypeVar

import uvloop

_T = TypeVar("_T")

LOOPS: dict[str, Callable[[], asyncio.AbstractEventLoop]] = {
    "asyncio": asyncio.new_event_loop,
    "uvloop": uvloop.new_event_loop,
}


def run_on(loop: str, scenario: Callable[[], Awaitable[_T]], timeout_s: float) -> _T:
    """``scenario()`` in a fresh loop of kind ``loop``, failing after ``timeout_s``."""

    async def bounded() -> _T:
        async with asyncio.timeout(timeout_s):
            return await scenario()

    with asyncio.Runner(loop_factory=LOOPS[loop]) as runner:
        return runner.run(bounded())
