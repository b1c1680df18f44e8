"""One request's pass through a ring epoch: the coordinator's stages, then the workers.

In a ring the coordinator sends one FORWARD to the first worker and the last one answers; in a
hub every worker answers the coordinator, which sends the activations on. Each FORWARD carries
the stage compute times so far, so what a reply took beyond its workers' compute is the hops'
time, told to ``on_hop``.
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import replace
from typing import TYPE_CHECKING

from fleetgui.fleet.ring.link import Dispatcher, WorkerLink, WorkerLostError
from fleetgui.fleet.ring.wiring import Wiring
from fleetgui.net.forward_codec import encode_forward, result_from_message
from fleetgui.net.protocol import raise_if_error
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
    for member in ring.members:
        # a pass through a worker already known lost would only wait out the forward timeout
        if member.lost:
            raise WorkerLostError(member.name, member.lost)
    compute: dict[int, float] = {}
    current = request
    result = ForwardResult(request.stream_id)
    if ring.local_route is not None:
        local = ring.local_route
        sent = replace(request, head=None) if ring.members else request
        if len(ring.local) == 1 and ring.members:  # one stage before the workers
            result = await local.run_inline_if_short(sent, config.inline_ms)
        else:
            result = await local.run(sent)
        if not ring.members:
            return result
        compute.update(result.compute_ms)
        if result.payload is None:
            raise RuntimeError("the coordinator's stages returned no hidden states")
        current = replace(request, payload=result.payload)
    if ring.members:
        targets = [ring.members[0]] if ring.wiring is Wiring.RING else list(ring.members)
        for position, link in enumerate(targets):
            last = position == len(targets) - 1
            sent = current if last else replace(current, head=None)
            result = await _remote(
                ring, link, sent, compute, dispatcher=dispatcher, config=config, on_hop=on_hop
            )
            compute.update(result.compute_ms)
            if not last:
                if result.payload is None:
                    raise RuntimeError(f"worker {link.name} returned no hidden states")
                current = replace(request, payload=result.payload)
    result.compute_ms = compute
    return result


async def _remote(
    ring: Ring,
    link: WorkerLink,
    request: ForwardRequest,
    compute: dict[int, float],
    *,
    dispatcher: Dispatcher,
    config: RouteConfig,
    on_hop: OnHop | None,
) -> ForwardResult:
    """One FORWARD to ``link``, awaited until the ring's answer comes back to the coordinator."""
    request_id, future = dispatcher.new()
    meta = {"epoch": ring.epoch, "compute_ms": {str(k): v for k, v in compute.items()}}
    started = time.perf_counter()
    try:
        await link.send(encode_forward(request, request_id=request_id, extra_meta=meta))
        async with asyncio.timeout(config.forward_timeout_s):
            message = await future
    except TimeoutError:
        raise RequestTimeoutError(
            f"no result from the ring within {config.forward_timeout_s:g} s"
        ) from None
    finally:
        dispatcher.forget(request_id)
    result = result_from_message(raise_if_error(message, f"the ring (epoch {ring.epoch})"))
    if on_hop is not None:
        elapsed = (time.perf_counter() - started) * 1000
        remote = sum(ms for stage, ms in result.compute_ms.items() if stage not in compute)
        on_hop(request.stream_id, max(0.0, elapsed - remote), request.payload.nbytes)
    return result
