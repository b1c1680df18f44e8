"""One request's pass through a ring epoch: the coordinator's stages, then the workers.

In a ring the coordinator sends one FORWARD to the first worker and the last one answers; in a
hub every worker answers the coordinator, which sends the activations on. Each FORWARD carries
the stage compute times so far, so what a reply took beyond its workers' compute is the hops'
time, told to ``on_hop``.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Sequence
from dataclasses import replace
from typing import TYPE_CHECKING

from fleetgui.fleet.ring.link import Dispatcher, WorkerLink, WorkerLostError
from fleetgui.fleet.ring.wiring import Wiring
from fleetgui.net.batch_codec import encode_forward_batch, results_from_message
from fleetgui.net.forward_codec import encode_forward, result_from_message
from fleetgui.net.protocol import ErrorCode, ProtocolError, raise_if_error
from fleetgui.net.secure_socket import RequestTimeoutError
from fleetgui.runtime.stage import ForwardRequest, ForwardResult

if TYPE_CHECKING:
    from fleetgui.fleet.ring.route import OnHop, Ring, RouteConfig


async def run_pass(
    ring: Ring,
    request: ForwardRequest,
    *,
    dispatcher: Dispatcher,
    config: RouteConfig,
    on_hop: OnHop | None,
) -> ForwardResult:
    """``request`` run once through ``ring``; raises what a lost or silent worker raises."""
    results = await run_batch_pass(
        ring, [request], dispatcher=dispatcher, config=config, on_hop=on_hop
    )
    return results[0]


def batches_travel(ring: Ring) -> bool:
    """Whether every worker of ``ring`` takes a pass of several streams as one message."""
    return all("FORWARD_BATCH" in link.hello.get("ops", ()) for link in ring.members)


async def run_batch_pass(
    ring: Ring,
    requests: Sequence[ForwardRequest],
    *,
    dispatcher: Dispatcher,
    config: RouteConfig,
    on_hop: OnHop | None,
) -> list[ForwardResult]:
    """One pass of ``requests`` (each of another stream) through ``ring``: one message a hop
    (workers that take batches; else one per request, side by side)."""
    if len(requests) > 1 and not batches_travel(ring):
        return list(
            await asyncio.gather(
                *(
                    run_pass(ring, request, dispatcher=dispatcher, config=config, on_hop=on_hop)
                    for request in requests
                )
            )
        )
    for member in ring.members:
        # a pass through a worker already known lost would only wait out the forward timeout
        if member.lost:
            raise WorkerLostError(member.name, member.lost)
    compute: dict[int, float] = {}
    current = list(requests)
    results = [ForwardResult(request.stream_id) for request in requests]
    if ring.local_route is not None:
        local = ring.local_route
        sent = [replace(r, head=None) for r in requests] if ring.members else list(requests)
        if len(ring.local) == 1 and ring.members:  # one stage before the workers
            results = await local.run_batch_inline_if_short(sent, config.inline_ms)
        else:
            results = await local.run_batch(sent)
        if not ring.members:
            return results
        compute.update(results[0].compute_ms)
        current = _onward(requests, results, "the coordinator's stages")
    if ring.members:
        targets = [ring.members[0]] if ring.wiring is Wiring.RING else list(ring.members)
        for position, link in enumerate(targets):
            last = position == len(targets) - 1
            sent = current if last else [replace(r, head=None) for r in current]
            results = await _remote(
                ring, link, sent, compute, dispatcher=dispatcher, config=config, on_hop=on_hop
            )
            compute.update(results[0].compute_ms)
            if not last:
                current = _onward(requests, results, f"worker {link.name}")
    for result in results:
        result.compute_ms = dict(compute)
    return results


def _onward(
    requests: Sequence[ForwardRequest], results: Sequence[ForwardResult], who: str
) -> list[ForwardRequest]:
    """The requests again, carrying the hidden states ``results`` hold."""
    onward = []
    for request, result in zip(requests, results, strict=True):
        if result.payload is None:
            raise RuntimeError(f"{who} returned no hidden states")
        onward.append(replace(request, payload=result.payload))
    return onward


async def _remote(
    ring: Ring,
    link: WorkerLink,
    requests: Sequence[ForwardRequest],
    compute: dict[int, float],
    *,
    dispatcher: Dispatcher,
    config: RouteConfig,
    on_hop: OnHop | None,
) -> list[ForwardResult]:
    """One FORWARD (or FORWARD_BATCH) to ``link``, awaited until the ring's answer comes back
    to the coordinator."""
    request_id, future = dispatcher.new()
    meta = {"epoch": ring.epoch, "compute_ms": {str(k): v for k, v in compute.items()}}
    batch = len(requests) > 1
    started = time.perf_counter()
    try:
        if batch:
            frames = encode_forward_batch(requests, request_id=request_id, extra_meta=meta)
        else:
            frames = encode_forward(requests[0], request_id=request_id, extra_meta=meta)
        await link.send(frames)
        async with asyncio.timeout(config.forward_timeout_s):
            message = await future
    except TimeoutError:
        raise RequestTimeoutError(
            f"no result from the ring within {config.forward_timeout_s:g} s"
        ) from None
    finally:
        dispatcher.forget(request_id)
    answer = raise_if_error(message, f"the ring (epoch {ring.epoch})")
    results = results_from_message(answer) if batch else [result_from_message(answer)]
    if [r.stream_id for r in results] != [r.stream_id for r in requests]:
        raise ProtocolError(ErrorCode.BAD_FIELD, "the ring answered for other streams")
    if on_hop is not None:
        elapsed = (time.perf_counter() - started) * 1000
        remote = sum(ms for stage, ms in results[0].compute_ms.items() if stage not in compute)
        nbytes = sum(request.payload.nbytes for request in requests)
        for request in requests:
            on_hop(request.stream_id, max(0.0, elapsed - remote), nbytes)
    return results
