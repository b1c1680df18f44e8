"""The pipeline's stream limit: first come first served, resizable while requests wait, a
cancelled waiter never leaks a slot; and a real pipeline holding a second prompt back."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from pathlib import Path

import pytest
from runtime_support import pipeline

from fleetgui.generation_config import GenerationConfig
from fleetgui.runtime.metrics import TokensEmitted
from fleetgui.runtime.stream_limit import StreamLimit


def test_waiters_start_in_arrival_order_and_when_the_limit_grows() -> None:
    async def main() -> list[str]:
        limit, order = StreamLimit(1), []

        async def user(name: str, hold: asyncio.Event) -> None:
            async with limit.slot():
                order.append(name)
                await hold.wait()

        holds = {n: asyncio.Event() for n in "abcd"}
        tasks = [asyncio.create_task(user(n, holds[n])) for n in "abcd"]
        await asyncio.sleep(0.01)
        assert order == ["a"] and limit.waiting == 3
        limit.set(3)  # b and c start at once, in their order
        await asyncio.sleep(0.01)
        assert order == ["a", "b", "c"] and limit.active == 3
        for name in "abc":
            holds[name].set()
        holds["d"].set()
        await asyncio.gather(*tasks)
        assert limit.active == 0 and limit.waiting == 0
        return order

    assert asyncio.run(main()) == ["a", "b", "c", "d"]


def test_a_cancelled_waiter_leaves_no_slot_taken() -> None:
    async def main() -> None:
        limit = StreamLimit(1)
        await limit.acquire()
        waiter = asyncio.create_task(limit.acquire())
        await asyncio.sleep(0.01)
        waiter.cancel()
        with pytest.raises(asyncio.CancelledError):
            await waiter
        limit.release()
        assert limit.active == 0
        # granted and cancelled in the same iteration: the slot goes back
        await limit.acquire()
        granted = asyncio.create_task(limit.acquire())
        await asyncio.sleep(0.01)
        limit.release()  # grants it ...
        granted.cancel()  # ... as it is cancelled
        with pytest.raises(asyncio.CancelledError):
            await granted
        assert limit.active == 0
        async with asyncio.timeout(1):
            await limit.acquire()  # free for the next one

    asyncio.run(main())


def test_no_limit_below_one() -> None:
    with pytest.raises(ValueError, match="at least 1"):
        StreamLimit(0)


def test_a_pipeline_limited_to_one_stream_runs_the_second_prompt_after_the_first(
    tiny_export: Callable[..., Path],
) -> None:
    runtime = pipeline(tiny_export(2))
    runtime.streams.set(1)
    emitted: list[int] = []
    runtime.metrics.subscribe(
        lambda e: emitted.append(e.stream_id) if isinstance(e, TokensEmitted) else None
    )
    options = GenerationConfig(max_new_tokens=12)

    async def main() -> None:
        try:
            await asyncio.gather(
                runtime.complete("Once upon a time", options), runtime.complete("Hello", options)
            )
        finally:
            await runtime.close()

    asyncio.run(main())
    first = emitted[0]
    switch = emitted.index(next(s for s in emitted if s != first))
    assert set(emitted[:switch]) == {first} and first not in emitted[switch:]  # one after another


def test_a_hold_waits_for_the_running_ones_and_keeps_new_ones_waiting_until_resumed() -> None:
    async def main() -> None:
        limit, order = StreamLimit(2), []
        ends = {n: asyncio.Event() for n in "abcd"}

        async def user(name: str) -> None:
            async with limit.slot():
                order.append(name)
                await ends[name].wait()

        running = [asyncio.create_task(user(n)) for n in "ab"]
        await asyncio.sleep(0.01)
        hold = asyncio.create_task(limit.hold())
        await asyncio.sleep(0.01)
        assert limit.held and not hold.done()  # a and b still run
        waiting = [asyncio.create_task(user(n)) for n in "cd"]
        ends["a"].set()
        await asyncio.sleep(0.01)
        assert not hold.done() and order == ["a", "b"]  # held: c does not take a's slot
        ends["b"].set()
        await asyncio.wait_for(hold, 1)  # none runs now
        await asyncio.sleep(0.01)
        assert order == ["a", "b"] and limit.waiting == 2 and limit.active == 0
        limit.resume()
        await asyncio.sleep(0.01)
        assert order == ["a", "b", "c", "d"] and not limit.held
        ends["c"].set()
        ends["d"].set()
        await asyncio.gather(*running, *waiting)
        assert limit.active == 0

    asyncio.run(main())


def test_a_hold_cancelled_while_it_waits_lets_go() -> None:
    async def main() -> None:
        limit = StreamLimit(1)
        await limit.acquire()
        hold = asyncio.create_task(limit.hold())
        await asyncio.sleep(0.01)
        assert limit.held
        hold.cancel()
        with pytest.raises(asyncio.CancelledError):
            await hold
        assert not limit.held
        limit.release()
        async with asyncio.timeout(1):
            await limit.acquire()  # not held: starts at once

    asyncio.run(main())
