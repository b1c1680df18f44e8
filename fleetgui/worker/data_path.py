"""A worker's data path: FORWARD (and FORWARD_BATCH) through its stages and on, and DECODE runs.

A FORWARD of the current ring epoch runs the hosted stages, then goes on to the next worker
with the activations, or, from the last worker (or in a hub), back to the coordinator as the
head's RESULT. Errors go straight to the coordinator, which waits for the ring's answer, not
for this worker's. A FORWARD of another epoch is refused, so a message still travelling from
before a failover never touches a rebuilt cache.

DECODE (a worker holding the whole model) runs a stream's plain decode steps here, one RESULT
per step (:mod:`fleetgui.worker.decode_run`); STOP_DECODE ends such a run.
"""

from __future__ import annotations

import contextlib
import logging
from dataclasses import replace
from typing import TYPE_CHECKING, Any

from fleetgui.net.batch_codec import (
    encode_forward_batch,
    encode_result_batch,
    requests_from_message,
)
from fleetgui.net.decode_codec import decode_steps_from_message
from fleetgui.net.forward_codec import (
    compute_ms_from,
    encode_forward,
    encode_result,
    request_from_message,
)
from fleetgui.net.protocol import (
    ErrorCode,
    Flags,
    Message,
    Op,
    ProtocolError,
    encode,
    error_message,
)
from fleetgui.net.secure_socket import Incoming, SecureServer
from fleetgui.runtime.stage import ForwardRequest, ForwardResult, StageError
from fleetgui.worker.decode_run import WorkerDecodes
from fleetgui.worker.replies import reply, reply_error
from fleetgui.worker.ring_membership import RingMembership
from fleetgui.worker.stage_host import StageHost

if TYPE_CHECKING:
    from fleetgui.worker.agent import WorkerConfig

log = logging.getLogger(__name__)


class DataPath:
    """Serves FORWARD, DECODE and STOP_DECODE for one worker (see module doc); ``forwards``
    counts the passes its stages ran."""

    def __init__(
        self, config: WorkerConfig, server: SecureServer, host: StageHost, ring: RingMembership
    ) -> None:
        self.config = config
        self.server = server
        self.host = host
        self.ring = ring
        self.decodes = WorkerDecodes()
        self.forwards = 0

    async def forward(self, incoming: Incoming) -> None:
        """Handle a FORWARD (see module doc)."""
        await self._forward(incoming, batch=False)

    async def forward_batch(self, incoming: Incoming) -> None:
        """Handle a FORWARD_BATCH: one pass of several streams, passed on as one message."""
        await self._forward(incoming, batch=True)

    async def _forward(self, incoming: Incoming, *, batch: bool) -> None:
        message = incoming.message
        epoch = message.meta.get("epoch")
        if epoch != self.ring.epoch or self.host.hosted is None:
            # answered, not dropped, so a sender never waits out its timeout; a ring's stale
            # FORWARD after a failover gets this too, and its sender drops late replies
            log.debug("refusing a FORWARD of epoch %r (now %d)", epoch, self.ring.epoch)
            loaded = (
                "no stages loaded" if self.host.hosted is None else f"ring epoch {self.ring.epoch}"
            )
            text = f"worker {self.config.name!r} has {loaded}, not epoch {epoch!r}"
            await reply_error(self.server, incoming, ErrorCode.NOT_LOADED, text[:300])
            return
        try:
            requests = requests_from_message(message) if batch else [request_from_message(message)]
            timings = compute_ms_from(message.meta)
        except ProtocolError as exc:
            await self._to_coordinator(
                error_message(exc.code, str(exc), request_id=message.request_id)
            )
            return
        async with self.host.compute:
            hosted = self.host.hosted
            if epoch != self.ring.epoch or hosted is None:
                return
            try:
                results = await hosted.route.run_batch_inline_if_short(
                    requests, self.config.inline_ms
                )
            except StageError as exc:
                text = f"worker {self.config.name!r}: {exc}"
                answer = error_message(ErrorCode.STAGE_FAILED, text, request_id=message.request_id)
                await self._to_coordinator(answer)
                return
            self.forwards += 1
        timings.update(results[0].compute_ms)
        for result in results:
            result.compute_ms = dict(timings)
        extra: dict[str, Any] = {"epoch": epoch}
        nxt = self.ring.next
        if hosted.is_last or nxt is None:  # end of the ring, or a hub
            frames = (
                encode_result_batch(results, request_id=message.request_id, extra_meta=extra)
                if batch
                else encode_result(results[0], request_id=message.request_id, extra_meta=extra)
            )
            await self._to_coordinator_frames(frames)
            return
        onward = []
        for request, result in zip(requests, results, strict=True):
            if result.payload is None:
                raise StageError(
                    f"worker {self.config.name!r}: its stages returned no hidden states"
                )
            onward.append(replace(request, payload=result.payload))
        extra["compute_ms"] = {str(k): v for k, v in timings.items()}
        frames = (
            encode_forward_batch(onward, request_id=message.request_id, extra_meta=extra)
            if batch
            else encode_forward(onward[0], request_id=message.request_id, extra_meta=extra)
        )
        try:
            await nxt.send(frames)
        except Exception as exc:
            text = f"worker {self.config.name!r} cannot pass activations on: {exc}"
            await self._to_coordinator(
                error_message(ErrorCode.INTERNAL, text, request_id=message.request_id)
            )

    async def decode(self, incoming: Incoming) -> None:
        """Handle a DECODE: run its steps, each result sent back as it finishes."""
        message = incoming.message
        epoch = message.meta.get("epoch")
        hosted = self.host.hosted
        if epoch != self.ring.epoch or hosted is None:
            loaded = "no stages loaded" if hosted is None else f"ring epoch {self.ring.epoch}"
            raise ProtocolError(
                ErrorCode.NOT_LOADED,
                f"worker {self.config.name!r} has {loaded}, not epoch {epoch!r}"[:300],
            )
        if not (hosted.is_first and hosted.is_last):
            raise ProtocolError(
                ErrorCode.BAD_FIELD, "DECODE needs a worker holding the whole model"
            )
        steps = decode_steps_from_message(message)

        async def step(request: ForwardRequest) -> ForwardResult:
            async with self.host.compute:
                if epoch != self.ring.epoch or self.host.hosted is not hosted:
                    raise ProtocolError(ErrorCode.NOT_LOADED, "the ring changed mid-DECODE")
                try:
                    result = await hosted.route.run_inline_if_short(request, self.config.inline_ms)
                except StageError as exc:
                    raise ProtocolError(
                        ErrorCode.STAGE_FAILED, f"worker {self.config.name!r}: {exc}"
                    ) from None
                self.forwards += 1
                return result

        async def send(result: ForwardResult, last: bool) -> None:
            frames = encode_result(
                result,
                request_id=message.request_id,
                extra_meta={"epoch": epoch},
                flags=Flags.FINAL if last else Flags.NONE,
            )
            await self.server.send(incoming.peer, frames)

        await self.decodes.run(steps, step, send)

    async def stop_decode(self, incoming: Incoming) -> None:
        """Handle a STOP_DECODE: end the stream's run, answering whether one was under way."""
        stopped = await self.decodes.stop(incoming.message.stream_id)
        await reply(self.server, incoming, Op.STOP_DECODE, {"stopped": stopped})

    async def _to_coordinator(self, message: Message) -> None:
        await self._to_coordinator_frames(encode(message))

    async def _to_coordinator_frames(self, frames: list[Any]) -> None:
        if self.ring.coordinator is None:
            log.warning("no coordinator to send a result to")
            return
        with contextlib.suppress(Exception):
            await self.server.send(self.ring.coordinator, frames)
