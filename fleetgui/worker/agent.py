"""The worker agent: serves paired coordinators over the encrypted protocol.

One asyncio loop does everything. Short stage computations (decode steps, speculative
verifies) run on the loop's own thread, long ones (prompt chunks) and compiling in a thread, so
heartbeats are answered while a stage loads or works through a prompt and wait at most one short
pass otherwise. Requests:

* HELLO: who this worker is and what it has loaded.
* HAVE_FILES / PUT_CHUNK: shard files, resumable, checked by sha256; LOAD_STAGE / UNLOAD:
  compile the stages a coordinator assigned; PROFILE: time a probe stage on this PC's devices
  (all in :mod:`stage_host`).
* RING: the ring this worker is part of (:mod:`ring_membership`): its epoch, the next worker (or
  none: results go back to the coordinator that sent RING) and the previous worker's key, which
  may then send FORWARD. A new ring drops every stream's state; FORWARDs of an older epoch are
  dropped, so a message still travelling from before a failover never touches a rebuilt cache.
* FORWARD: run the hosted stages, then pass the activations to the next worker, or send the
  head's RESULT to the coordinator. Errors go straight to the coordinator.
* DECODE / STOP_DECODE: a worker holding the whole model runs a stream's plain decode steps by
  itself, one RESULT per step (:mod:`decode_run`). FORWARD and DECODE, the data path, are
  served by :mod:`data_path`.
* RESET / RELEASE: a stream's state (ending its DECODE first). HEARTBEAT: liveness and load.

A handler that cannot serve a request raises; :meth:`WorkerAgent._answered` answers every
exception with an ERROR naming the cause, so no request goes unanswered.
"""

from __future__ import annotations

import asyncio
import logging
import math
from collections.abc import Callable, Coroutine
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeGuard

import psutil

from fleetgui.net.keys import KeyPair
from fleetgui.net.protocol import ErrorCode, Op, ProtocolError, RefusedError
from fleetgui.net.secure_socket import Incoming, SecureServer
from fleetgui.net.trust import Authorizer
from fleetgui.runtime.stage import StageError
from fleetgui.worker.data_path import DataPath
from fleetgui.worker.replies import reply, reply_error
from fleetgui.worker.ring_membership import RingMembership
from fleetgui.worker.stage_host import StageHost

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
        self.ring = RingMembership(identity, authorizer, config.connect_timeout_s)
        self._info = info or (lambda: {"name": config.name})
        self._tasks: set[asyncio.Task[None]] = set()
        self.data_path = DataPath(config, self.server, self.host, self.ring)
        self._handlers: dict[Op, Callable[[Incoming], Coroutine[Any, Any, None]]] = {
            Op.FORWARD: self.data_path.forward,
            Op.FORWARD_BATCH: self.data_path.forward_batch,
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
            Op.DECODE: self.data_path.decode,
            Op.STOP_DECODE: self.data_path.stop_decode,
            Op.FORK: self._fork,
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
                await reply_error(
                    self.server, incoming, ErrorCode.INTERNAL, "internal error; see log"
                )

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
            self._spawn(
                reply_error(self.server, incoming, ErrorCode.BAD_OP, f"{op.name} not served")
            )
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
            await reply_error(self.server, incoming, exc.code, str(exc), **exc.meta)
        except ProtocolError as exc:
            await reply_error(self.server, incoming, exc.code, f"{op}: {exc}")
        except OSError as exc:  # disk full, read-only cache, a file that vanished
            log.warning("%s failed on this worker's disk: %s", op, exc)
            await reply_error(
                self.server, incoming, ErrorCode.INTERNAL, f"{op} failed on the worker: {exc}"
            )
        except Exception as exc:
            log.exception("failed to handle %s", op)
            await reply_error(
                self.server,
                incoming,
                ErrorCode.INTERNAL,
                f"{op} failed on the worker ({type(exc).__name__}: {exc})",
            )

    # -- control ------------------------------------------------------------------------------

    def _status(self) -> dict[str, Any]:
        hosted = self.host.hosted
        return {
            "epoch": self.ring.epoch,
            "model_id": hosted.spec.model_id if hosted else None,
            "stages": list(hosted.spec.indices) if hosted else [],
            "streams": len(hosted.stages[0].stream_ids()) if hosted else 0,
            "forwards": self.data_path.forwards,
            "free_ram_bytes": int(psutil.virtual_memory().available),
        }

    async def _hello(self, incoming: Incoming) -> None:
        ops = sorted(op.name for op in self._handlers)  # what a coordinator may ask of this one
        await reply(
            self.server, incoming, Op.HELLO_OK, {"info": self._info(), **self._status(), "ops": ops}
        )

    async def _heartbeat(self, incoming: Incoming) -> None:
        await reply(self.server, incoming, Op.HEARTBEAT, self._status())

    async def _have_files(self, incoming: Incoming) -> None:
        have = await self.host.have_files(incoming.message.meta.get("files"))
        await reply(self.server, incoming, Op.HAVE_FILES, have)

    async def _put_chunk(self, incoming: Incoming) -> None:
        await reply(self.server, incoming, Op.PUT_OK, await self.host.put_chunk(incoming.message))

    async def _load_stage(self, incoming: Incoming) -> None:
        await reply(
            self.server, incoming, Op.STAGE_READY, await self.host.load(incoming.message.meta)
        )

    async def _profile(self, incoming: Incoming) -> None:
        await reply(
            self.server, incoming, Op.PROFILE, await self.host.profile(incoming.message.meta)
        )

    async def _unload(self, incoming: Incoming) -> None:
        await self.host.unload()
        self.ring.leave()
        await reply(self.server, incoming, Op.STAGE_READY, {"unloaded": True})

    async def _ring(self, incoming: Incoming) -> None:
        next_name = await self.ring.join(incoming.message.meta, incoming.peer)
        async with self.host.compute:  # a new ring starts every stream afresh
            if self.host.hosted is not None:
                await self.host.hosted.release_all()
        log.info("ring epoch %d: next %s", self.ring.epoch, next_name)
        await reply(self.server, incoming, Op.RING_OK, {"epoch": self.ring.epoch})

    async def _fork(self, incoming: Incoming) -> None:
        """FORK: the coordinator's meta is checked here (types and ranges) and by the stages
        (the source must hold the entries); a bad one is answered with an error."""
        message = incoming.message
        source, keep = message.meta.get("source"), message.meta.get("keep")
        if not (_whole(source) and _whole(keep) and keep > 0):
            text = "FORK needs meta source (a stream id) and keep (>= 1)"
            await reply_error(self.server, incoming, ErrorCode.BAD_FIELD, text)
            return
        await self.data_path.decodes.stop(message.stream_id)
        async with self.host.compute:
            hosted = self.host.hosted
            if hosted is None:
                await reply_error(self.server, incoming, ErrorCode.NOT_LOADED, "no stage loaded")
                return
            try:
                await hosted.route.fork(source, message.stream_id, keep)
            except (StageError, RuntimeError) as exc:  # OpenVINO's errors are RuntimeErrors
                await reply_error(
                    self.server, incoming, ErrorCode.STAGE_FAILED, f"{self.config.name}: {exc}"
                )
                return
        await reply(self.server, incoming, Op.FORK)

    async def _stream_op(self, incoming: Incoming) -> None:
        stream_id = incoming.message.stream_id
        # its next step would write the cache being reset
        await self.data_path.decodes.stop(stream_id)
        async with self.host.compute:
            hosted = self.host.hosted
            if hosted is not None:
                if incoming.message.op is Op.RESET:
                    await hosted.route.reset(stream_id)
                else:
                    await hosted.route.release(stream_id)
        await reply(self.server, incoming, incoming.message.op)


def _whole(value: object) -> TypeGuard[int]:
    """A non-negative int from a peer's meta (bool is not one)."""
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0
