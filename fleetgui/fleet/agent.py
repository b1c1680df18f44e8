"""The worker agent: serves paired coordinators over the encrypted protocol.

One asyncio loop does everything. Short stage computations (decode steps, speculative
verifies) run on the loop's own thread, long ones (prompt chunks) and compiling in a thread, so
heartbeats are answered while a stage loads or works through a prompt and wait at most one short
pass otherwise. Requests:

* HELLO: who this worker is and what it has loaded.
* HAVE_FILES / PUT_CHUNK: shard files, resumable, checked by sha256; LOAD_STAGE / UNLOAD:
  compile the stages a coordinator assigned; PROFILE: time a probe stage on this PC's devices
  (all in :mod:`stage_host`).
* RING: the ring this worker is part of (:mod:`ring_place`): its epoch, the next worker (or
  none: results go back to the coordinator that sent RING) and the previous worker's key, which
  may then send FORWARD. A new ring drops every stream's state; FORWARDs of an older epoch are
  dropped, so a message still travelling from before a failover never touches a rebuilt cache.
* FORWARD: run the hosted stages, then pass the activations to the next worker, or send the
  head's RESULT to the coordinator. Errors go straight to the coordinator.
* DECODE / STOP_DECODE: a worker holding the whole model runs a stream's plain decode steps by
  itself, one RESULT per step (:mod:`worker_decode`).
* RESET / RELEASE: a stream's state (ending its DECODE first). HEARTBEAT: liveness and load.

A handler that cannot serve a request raises; :meth:`WorkerAgent._answered` answers every
exception with an ERROR naming the cause, so no request goes unanswered.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import math
from collections.abc import Callable, Coroutine
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import psutil

from fleetgui.fleet.forward_codec import (
    compute_ms_from,
    decode_steps_from_message,
    encode_forward,
    encode_result,
    request_from_message,
)
from fleetgui.fleet.keys import KeyPair
from fleetgui.fleet.protocol import (
    ErrorCode,
    Flags,
    Message,
    Op,
    ProtocolError,
    RefusedError,
    encode,
    error_message,
)
from fleetgui.fleet.ring_place import RingPlace
from fleetgui.fleet.secure_socket import Incoming, SecureServer
from fleetgui.fleet.stage_host import StageHost
from fleetgui.fleet.trust import Authorizer
from fleetgui.fleet.worker_decode import WorkerDecodes
from fleetgui.runtime.stage import ForwardRequest, ForwardResult, StageError

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class WorkerConfig:
    """How a worker agent runs."""

    name: str  # shown to coordinators
    cache_dir: Path  # shard files (blobs/, partial/, stages/)
    device: str = "CPU"  # OpenVINO device for stages
    threads: int = 0  # OpenVINO inference threads; 0: the plugin's default
    precision: str = "auto"  # f32 | bf16 | f16 | auto
    connect_timeout_s: float = 10.0  # to the next worker of the ring
    timings_file: Path | None = None  # PROFILE's cache; None: data_dir()/planner/probe_timings.json
    # Short FORWARDs (decode steps and speculative verifies: runtime.stage.SHORT_PASS_POSITIONS)
    # whose last one took at most this long compute on the event loop's thread (inf: all of
    # them): requests run one at a time anyway, and the hand-off to a stage thread and back
    # was most of a worker's context switches a token (docs/design-measurements.md). Longer
    # ones (prompt chunks) go to a stage thread, so heartbeats are never held up for long.
    inline_ms: float = math.inf


class WorkerAgent:
    """Serves one worker's stages (see module doc). ``info`` returns the worker's HELLO record."""

    def __init__(
        self,
        config: WorkerConfig,
        identity: KeyPair,
        authorizer: Authorizer,
        info: Callable[[], dict[str, Any]] | None = None,
    ) -> None:
        self.config = config
        self.identity = identity
        self.authorizer = authorizer
        self.server = SecureServer(identity, authorizer, name=config.name)
        self.host = StageHost(config)
        self.ring = RingPlace(identity, authorizer, config.connect_timeout_s)
        self._info = info or (lambda: {"name": config.name})
        self._tasks: set[asyncio.Task[None]] = set()
        self.forwards = 0
        self._decodes = WorkerDecodes()
        self._handlers: dict[Op, Callable[[Incoming], Coroutine[Any, Any, None]]] = {
            Op.FORWARD: self._forward,
            Op.HELLO: self._hello,
            Op.HEARTBEAT: self._heartbeat,
            Op.HAVE_FILES: self._have_files,
            Op.PUT_CHUNK: self._put_chunk,
            Op.LOAD_STAGE: self._load_stage,
            Op.UNLOAD: self._unload,
            Op.RING: self._ring,
            Op.RESET: self._stream_op,
            Op.RELEASE: self._stream_op,
            Op.PROFILE: self._profile,
            Op.DECODE: self._decode,
            Op.STOP_DECODE: self._stop_decode,
        }

    @property
    def busy(self) -> bool:
        return self.host.hosted is not None

    async def bind(self, endpoint: str) -> str:
        return await self.server.bind(endpoint)

    async def serve(self) -> None:
        """Handle requests until cancelled."""
        while True:
            incoming = await self.server.recv()
            try:
                self._dispatch(incoming)
            except Exception:  # one bad request must not stop the worker
                log.exception("failed to handle %s", incoming.message.op.name)
                await self._reply_error(incoming, ErrorCode.INTERNAL, "internal error; see log")

    async def close(self) -> None:
        for task in list(self._tasks):
            task.cancel()
        self.ring.close()
        self.server.close()

    # -- dispatch -----------------------------------------------------------------------------

    def _spawn(self, coro: Any) -> None:
        task = asyncio.get_running_loop().create_task(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    def _dispatch(self, incoming: Incoming) -> None:
        op = incoming.message.op
        handler = self._handlers.get(op)
        if handler is None:
            self._spawn(self._reply_error(incoming, ErrorCode.BAD_OP, f"{op.name} not served"))
            return
        self._spawn(self._answered(handler, incoming))

    async def _answered(
        self, handler: Callable[[Incoming], Coroutine[Any, Any, None]], incoming: Incoming
    ) -> None:
        """Run ``handler``; whatever it raises is answered with an error naming the cause, so a
        coordinator is never left waiting out its timeout (a full disk mid-upload raised
        OSError in PUT_CHUNK and sent nothing) and one request cannot stop the worker."""
        op = incoming.message.op.name
        try:
            await handler(incoming)
        except asyncio.CancelledError:
            raise
        except RefusedError as exc:  # the handler's own words
            await self._reply_error(incoming, exc.code, str(exc), **exc.meta)
        except ProtocolError as exc:
            await self._reply_error(incoming, exc.code, f"{op}: {exc}")
        except OSError as exc:  # disk full, read-only cache, a file that vanished
            log.warning("%s failed on this worker's disk: %s", op, exc)
            await self._reply_error(
                incoming, ErrorCode.INTERNAL, f"{op} failed on the worker: {exc}"
            )
        except Exception as exc:
            log.exception("failed to handle %s", op)
            await self._reply_error(
                incoming,
                ErrorCode.INTERNAL,
                f"{op} failed on the worker ({type(exc).__name__}: {exc})",
            )

    async def _reply(self, incoming: Incoming, op: Op, meta: dict[str, Any] | None = None) -> None:
        message = Message(
            op, incoming.message.stream_id, incoming.message.request_id, meta=meta or {}
        )
        await self.server.send(incoming.peer, encode(message))

    async def _reply_error(
        self, incoming: Incoming, code: ErrorCode, text: str, **meta: Any
    ) -> None:
        message = error_message(
            code, text, stream_id=incoming.message.stream_id, request_id=incoming.message.request_id
        )
        if meta:
            message = replace(message, meta={**message.meta, **meta})
        await self.server.send(incoming.peer, encode(message))

    # -- control ------------------------------------------------------------------------------

    def _status(self) -> dict[str, Any]:
        hosted = self.host.hosted
        return {
            "epoch": self.ring.epoch,
            "model_id": hosted.spec.model_id if hosted else None,
            "stages": list(hosted.spec.indices) if hosted else [],
            "streams": len(hosted.stages[0].stream_ids()) if hosted else 0,
            "forwards": self.forwards,
            "free_ram_bytes": int(psutil.virtual_memory().available),
        }

    async def _hello(self, incoming: Incoming) -> None:
        ops = sorted(op.name for op in self._handlers)  # what a coordinator may ask of this one
        await self._reply(
            incoming, Op.HELLO_OK, {"info": self._info(), **self._status(), "ops": ops}
        )

    async def _heartbeat(self, incoming: Incoming) -> None:
        await self._reply(incoming, Op.HEARTBEAT, self._status())

    async def _have_files(self, incoming: Incoming) -> None:
        reply = await self.host.have_files(incoming.message.meta.get("files"))
        await self._reply(incoming, Op.HAVE_FILES, reply)

    async def _put_chunk(self, incoming: Incoming) -> None:
        await self._reply(incoming, Op.PUT_OK, await self.host.put_chunk(incoming.message))

    async def _load_stage(self, incoming: Incoming) -> None:
        await self._reply(incoming, Op.STAGE_READY, await self.host.load(incoming.message.meta))

    async def _profile(self, incoming: Incoming) -> None:
        await self._reply(incoming, Op.PROFILE, await self.host.profile(incoming.message.meta))

    async def _unload(self, incoming: Incoming) -> None:
        await self.host.unload()
        self.ring.leave()
        await self._reply(incoming, Op.STAGE_READY, {"unloaded": True})

    async def _ring(self, incoming: Incoming) -> None:
        next_name = await self.ring.join(incoming.message.meta, incoming.peer)
        async with self.host.compute:  # a new ring starts every stream afresh
            if self.host.hosted is not None:
                await self.host.hosted.release_all()
        log.info("ring epoch %d: next %s", self.ring.epoch, next_name)
        await self._reply(incoming, Op.RING_OK, {"epoch": self.ring.epoch})

    async def _stream_op(self, incoming: Incoming) -> None:
        stream_id = incoming.message.stream_id
        await self._decodes.stop(stream_id)  # its next step would write the cache being reset
        async with self.host.compute:
            hosted = self.host.hosted
            if hosted is not None:
                if incoming.message.op is Op.RESET:
                    await hosted.route.reset(stream_id)
                else:
                    await hosted.route.release(stream_id)
        await self._reply(incoming, incoming.message.op)

    # -- the ring -----------------------------------------------------------------------------

    async def _forward(self, incoming: Incoming) -> None:
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
            await self._reply_error(incoming, ErrorCode.NOT_LOADED, text[:300])
            return
        try:
            request = request_from_message(message)
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
                result = await hosted.route.run_inline_if_short(request, self.config.inline_ms)
            except StageError as exc:
                text = f"worker {self.config.name!r}: {exc}"
                reply = error_message(ErrorCode.STAGE_FAILED, text, request_id=message.request_id)
                await self._to_coordinator(reply)
                return
            self.forwards += 1
        timings.update(result.compute_ms)
        result.compute_ms = timings
        extra = {"epoch": epoch}
        nxt = self.ring.next
        if hosted.is_last or nxt is None:  # end of the ring, or a hub
            await self._to_coordinator_frames(
                encode_result(result, request_id=message.request_id, extra_meta=extra)
            )
            return
        if result.payload is None:
            raise StageError(f"worker {self.config.name!r}: its stages returned no hidden states")
        onward = replace(request, payload=result.payload)
        extra["compute_ms"] = {str(k): v for k, v in timings.items()}
        frames = encode_forward(onward, request_id=message.request_id, extra_meta=extra)
        try:
            await nxt.send(frames)
        except Exception as exc:
            text = f"worker {self.config.name!r} cannot pass activations on: {exc}"
            await self._to_coordinator(
                error_message(ErrorCode.INTERNAL, text, request_id=message.request_id)
            )

    async def _decode(self, incoming: Incoming) -> None:
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

        await self._decodes.run(steps, step, send)

    async def _stop_decode(self, incoming: Incoming) -> None:
        stopped = await self._decodes.stop(incoming.message.stream_id)
        await self._reply(incoming, Op.STOP_DECODE, {"stopped": stopped})

    async def _to_coordinator(self, message: Message) -> None:
        await self._to_coordinator_frames(encode(message))

    async def _to_coordinator_frames(self, frames: list[Any]) -> None:
        if self.ring.coordinator is None:
            log.warning("no coordinator to send a result to")
            return
        with contextlib.suppress(Exception):
            await self.server.send(self.ring.coordinator, frames)
