"""The worker agent: serves paired coordinators over the encrypted protocol.

One asyncio loop does everything. Short stage computations (decode steps, speculative
verifies) run on the loop's own thread, long ones (prompt chunks) and compiling in a thread, so
heartbeats are answered while a stage loads or works through a prompt and wait at most one short
pass otherwise. Requests:

* HELLO: who this worker is and what it has loaded.
* HAVE_FILES / PUT_CHUNK: shard files, resumable, checked by sha256 (:mod:`blob_store`).
* LOAD_STAGE / UNLOAD: compile the stages a coordinator assigned (:mod:`hosted_stages`).
* RING: the ring this worker is part of: its epoch, the next worker (or none: results go back
  to the coordinator that sent RING) and the previous worker's key, which may then send FORWARD.
  A new ring drops every stream's state; FORWARDs of an older epoch are dropped, so a message
  still travelling from before a failover never touches a rebuilt cache.
* FORWARD: run the hosted stages, then pass the activations to the next worker, or send the
  head's RESULT to the coordinator. Errors go straight to the coordinator.
* DECODE / STOP_DECODE: a worker holding the whole model runs a stream's plain decode steps by
  itself, one RESULT per step (:mod:`worker_decode`).
* RESET / RELEASE: a stream's state (ending its DECODE first). HEARTBEAT: liveness and load.
* PROFILE: time a probe stage the coordinator sent (:mod:`probe_timing`) on this PC's devices,
  in a thread and after any stage computation (the compute lock), cached on disk; the reply
  says the ms per layer per device, the memory, and whether it all came from the cache.
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import logging
import math
import time
from collections.abc import Callable, Coroutine
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import psutil
import zmq

from fleetgui.addresses import format_address, parse_zmq_endpoint
from fleetgui.errors import FleetguiError
from fleetgui.fleet.blob_store import BlobError, BlobStore, DiskFullError
from fleetgui.fleet.forward_codec import (
    compute_ms_from,
    decode_steps_from_message,
    encode_forward,
    encode_result,
    request_from_message,
)
from fleetgui.fleet.hosted_stages import HostedStages, LoadSpec, StageSpecError
from fleetgui.fleet.keys import KeyPair, is_key
from fleetgui.fleet.probe_timing import (
    TIMINGS_FILE,
    ProbeSpec,
    ProbeSpecError,
    TimingCache,
    cached_timings,
    measure_stored_probe,
    stage_devices,
)
from fleetgui.fleet.protocol import (
    ErrorCode,
    Flags,
    Message,
    Op,
    ProtocolError,
    encode,
    error_message,
)
from fleetgui.fleet.secure_socket import ConnectError, Incoming, SecureClient, SecureServer
from fleetgui.fleet.trust import Authorizer
from fleetgui.fleet.worker_decode import WorkerDecodes
from fleetgui.paths import data_dir
from fleetgui.runtime.ov_stage import StageConfig
from fleetgui.runtime.stage import ForwardRequest, ForwardResult, StageError

log = logging.getLogger(__name__)

_DISK_FULL = (errno.ENOSPC, errno.EDQUOT)


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
        self.store = BlobStore(config.cache_dir)
        self._info = info or (lambda: {"name": config.name})
        self.hosted: HostedStages | None = None
        self.epoch = 0
        self._coordinator: bytes | None = None  # routing id of the coordinator of the ring
        self._next: SecureClient | None = None
        self._compute = asyncio.Lock()  # one stage computation at a time, in arrival order
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
        self._timings = TimingCache(config.timings_file or data_dir() / "planner" / TIMINGS_FILE)

    @property
    def busy(self) -> bool:
        return self.hosted is not None

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
        if self._next is not None:
            self._next.close()
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
        hosted = self.hosted
        return {
            "epoch": self.epoch,
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
        files = incoming.message.meta.get("files")
        if not isinstance(files, list) or len(files) > 100_000:
            await self._reply_error(incoming, ErrorCode.BAD_FIELD, "'files' must be a list")
            return
        have: list[str] = []
        received: dict[str, int] = {}
        try:
            for entry in files:
                sha, size = str(entry["sha256"]), int(entry["size"])
                if await asyncio.to_thread(self.store.has, sha, size):
                    have.append(sha)
                elif (held := self.store.received(sha)) > 0:
                    received[sha] = held
        except (BlobError, KeyError, TypeError, ValueError) as exc:
            await self._reply_error(incoming, ErrorCode.BAD_FIELD, f"bad file entry: {exc}")
            return
        await self._reply(incoming, Op.HAVE_FILES, {"have": have, "received": received})

    async def _put_chunk(self, incoming: Incoming) -> None:
        message = incoming.message
        meta = message.meta
        sha = str(meta.get("sha256", ""))
        try:
            if len(message.tensors) != 1 or message.tensors[0].dtype.itemsize != 1:
                raise BlobError("a chunk is one tensor of bytes")
            sha, size, offset = str(meta["sha256"]), int(meta["size"]), int(meta["offset"])
            held = self.store.write_chunk(sha, size, offset, message.tensors[0].data)
            complete = bool(message.flags & Flags.FINAL)
            if complete:
                await asyncio.to_thread(self.store.finish, sha, size)
        except BlobError as exc:
            code = ErrorCode.BAD_HASH if "damaged" in str(exc) else ErrorCode.BAD_FIELD
            if isinstance(exc, DiskFullError):  # the worker's disk, not the request, is at fault
                code = ErrorCode.INTERNAL
            held = 0
            with contextlib.suppress(BlobError):  # an invalid sha256 holds nothing
                held = self.store.received(sha) if sha else 0
            await self._reply_error(incoming, code, str(exc), received=held)
            return
        except (KeyError, TypeError, ValueError) as exc:
            await self._reply_error(incoming, ErrorCode.BAD_FIELD, f"bad chunk: {exc!r}")
            return
        await self._reply(incoming, Op.PUT_OK, {"received": held, "complete": complete})

    def _stage_config(self, threads: int, precision: str, device: str = "CPU") -> StageConfig:
        """How to compile what a coordinator asked for: the worker's own ``--device``,
        ``--threads`` and ``--precision`` (unless auto) win over the request's."""
        return StageConfig(
            device=self.config.device or device,
            threads=self.config.threads or threads,
            precision=precision if self.config.precision == "auto" else self.config.precision,
        )

    async def _load_stage(self, incoming: Incoming) -> None:
        try:
            spec = LoadSpec.from_meta(incoming.message.meta)
        except StageSpecError as exc:
            await self._reply_error(incoming, ErrorCode.BAD_FIELD, str(exc))
            return
        if self.hosted is not None and self.hosted.spec == spec:
            await self._reply(incoming, Op.STAGE_READY, {"compile_s": 0.0, "reused": True})
            return
        missing = [f.sha256 for f in spec.files if not self.store.has(f.sha256, f.size)]
        if missing:
            text = f"{len(missing)} shard file(s) are missing or damaged: deploy them first"
            await self._reply_error(incoming, ErrorCode.MISSING_FILES, text, missing=missing)
            return
        config = self._stage_config(spec.threads, spec.precision, spec.device)
        started = time.perf_counter()
        async with self._compute:
            await self._drop_hosted()
            try:
                hosted = await asyncio.to_thread(HostedStages.load, spec, self.store, config)
            except BlobError as exc:
                await self._reply_error(incoming, ErrorCode.MISSING_FILES, str(exc), missing=[])
                return
            except OSError as exc:  # linking the stage folder: a read-only or full cache
                log.warning("loading stages %s failed on the cache: %s", list(spec.indices), exc)
                text = (
                    f"could not load stages {list(spec.indices)}: the worker's shard cache "
                    f"{self.config.cache_dir} failed ({exc}): "
                    + ("free some space" if exc.errno in _DISK_FULL else "make it writable")
                    + " there, or start the worker with another --cache"
                )
                await self._reply_error(incoming, ErrorCode.STAGE_FAILED, text)
                return
            except Exception as exc:  # OpenVINO compile errors: tell the coordinator why
                log.exception("loading stages %s failed", list(spec.indices))
                text = f"could not load stages {list(spec.indices)}: {exc}"
                await self._reply_error(incoming, ErrorCode.STAGE_FAILED, text)
                return
            self.hosted = hosted
        meta = {"compile_s": time.perf_counter() - started, "reused": False}
        await self._reply(incoming, Op.STAGE_READY, meta)

    async def _profile(self, incoming: Incoming) -> None:
        try:
            spec = ProbeSpec.from_meta(incoming.message.meta)
        except ProbeSpecError as exc:
            await self._reply_error(incoming, ErrorCode.BAD_FIELD, str(exc))
            return
        base = self._stage_config(spec.threads, spec.precision)
        devices = list(spec.devices) or await asyncio.to_thread(stage_devices)
        cached = await asyncio.to_thread(cached_timings, spec, devices, base, self._timings)
        if len(cached) < len(devices):
            missing = [
                f.sha256
                for f in spec.files
                if not await asyncio.to_thread(self.store.has, f.sha256, f.size)
            ]
            if missing:
                text = f"{len(missing)} probe file(s) are missing or damaged: send them first"
                await self._reply_error(incoming, ErrorCode.MISSING_FILES, text, missing=missing)
                return
        async with self._compute:  # never while a stage computes, and never two at once
            try:
                result = await asyncio.to_thread(
                    measure_stored_probe, self.store, spec, devices, base, self._timings
                )
            except BlobError as exc:
                await self._reply_error(incoming, ErrorCode.MISSING_FILES, str(exc), missing=[])
                return
        if not result.ms_per_layer:
            why = "; ".join(f"{d}: {reason}" for d, reason in result.failed.items())
            text = f"worker {self.config.name!r} could not time the probe: {why or 'no device'}"
            await self._reply_error(incoming, ErrorCode.STAGE_FAILED, text)
            return
        meta = {**result.to_meta(), "stage_device": self.config.device or "CPU"}
        await self._reply(incoming, Op.PROFILE, meta)

    async def _drop_hosted(self) -> None:
        if self.hosted is not None:
            await self.hosted.route.close()
            self.hosted = None

    async def _unload(self, incoming: Incoming) -> None:
        async with self._compute:
            await self._drop_hosted()
        self._set_next(None)
        self.authorizer.set_ring_peers(())
        await self._reply(incoming, Op.STAGE_READY, {"unloaded": True})

    def _set_next(self, client: SecureClient | None) -> None:
        if self._next is not None:
            self._next.close()
        self._next = client

    async def _ring(self, incoming: Incoming) -> None:
        meta = incoming.message.meta
        epoch, nxt, peers = meta.get("epoch"), meta.get("next"), meta.get("peers", [])
        if not isinstance(epoch, int) or not isinstance(peers, list) or len(peers) > 64:
            await self._reply_error(incoming, ErrorCode.BAD_FIELD, "RING needs 'epoch' and 'peers'")
            return
        # every field is checked before anything changes: a malformed RING leaves the ring as it was
        try:
            target = _next_worker(nxt)
            bad_peer = next((p for p in peers if not isinstance(p, str) or not is_key(p)), None)
            if bad_peer is not None:
                raise ValueError(f"peer {str(bad_peer)[:60]!r} is not a CURVE public key")
        except ValueError as exc:
            await self._reply_error(incoming, ErrorCode.BAD_FIELD, f"RING: {exc}")
            return
        self.epoch = epoch  # from now on, FORWARDs of older epochs are dropped
        self._coordinator = incoming.peer
        self.authorizer.set_ring_peers(peers)
        client: SecureClient | None = None
        if target is not None:
            name, endpoint, public_key = target
            try:
                await _probe_next_worker(endpoint, self.config.connect_timeout_s)
                client = SecureClient(self.identity, public_key, name=name)
                await client.connect(endpoint, self.config.connect_timeout_s)
            except (ConnectError, OSError, zmq.ZMQError) as exc:
                if client is not None:
                    client.close()
                text = f"cannot reach the next worker {name!r} at {endpoint}: {exc}"
                await self._reply_error(incoming, ErrorCode.BAD_FIELD, text)
                return
        self._set_next(client)
        async with self._compute:
            if self.hosted is not None:
                await self.hosted.release_all()
        log.info("ring epoch %d: next %s", epoch, target[0] if target else "the coordinator")
        await self._reply(incoming, Op.RING_OK, {"epoch": epoch})

    async def _stream_op(self, incoming: Incoming) -> None:
        stream_id = incoming.message.stream_id
        await self._decodes.stop(stream_id)  # its next step would write the cache being reset
        async with self._compute:
            if self.hosted is not None:
                if incoming.message.op is Op.RESET:
                    await self.hosted.route.reset(stream_id)
                else:
                    await self.hosted.route.release(stream_id)
        await self._reply(incoming, incoming.message.op)

    # -- the ring -----------------------------------------------------------------------------

    async def _forward(self, incoming: Incoming) -> None:
        message = incoming.message
        epoch = message.meta.get("epoch")
        if epoch != self.epoch or self.hosted is None:
            # answered, not dropped, so a sender never waits out its timeout; a ring's stale
            # FORWARD after a failover gets this too, and its sender drops late replies
            log.debug("refusing a FORWARD of epoch %r (now %d)", epoch, self.epoch)
            loaded = "no stages loaded" if self.hosted is None else f"ring epoch {self.epoch}"
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
        async with self._compute:
            hosted = self.hosted
            if epoch != self.epoch or hosted is None:
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
        if hosted.is_last or self._next is None:  # end of the ring, or a hub
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
            await self._next.send(frames)
        except Exception as exc:
            text = f"worker {self.config.name!r} cannot pass activations on: {exc}"
            await self._to_coordinator(
                error_message(ErrorCode.INTERNAL, text, request_id=message.request_id)
            )

    async def _decode(self, incoming: Incoming) -> None:
        message = incoming.message
        epoch = message.meta.get("epoch")
        hosted = self.hosted
        if epoch != self.epoch or hosted is None:
            loaded = "no stages loaded" if hosted is None else f"ring epoch {self.epoch}"
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
            async with self._compute:
                if epoch != self.epoch or self.hosted is not hosted:
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
        if self._coordinator is None:
            log.warning("no coordinator to send a result to")
            return
        with contextlib.suppress(Exception):
            await self.server.send(self._coordinator, frames)


def _next_worker(nxt: Any) -> tuple[str, str, str] | None:
    """The next worker a RING names, as (name, endpoint, public key), or None (results go to
    the coordinator); ValueError naming the field that a worker could never connect with."""
    if nxt is None:
        return None
    if not isinstance(nxt, dict):
        raise ValueError("'next' must be an object or null")
    endpoint, public_key = nxt.get("endpoint"), nxt.get("public_key")
    try:
        parse_zmq_endpoint(endpoint if isinstance(endpoint, str) else "")
    except FleetguiError:
        raise ValueError(
            f"the next worker's endpoint {str(endpoint)[:100]!r} is not tcp://host:port"
        ) from None
    assert isinstance(endpoint, str)
    if not isinstance(public_key, str) or not is_key(public_key):
        raise ValueError(
            f"the next worker's public key {str(public_key)[:60]!r} is not a CURVE public key "
            "(40 Z85 characters, as `fleetgui worker` prints it)"
        )
    return str(nxt.get("name", "next"))[:100], endpoint, public_key


async def _probe_next_worker(endpoint: str, timeout_s: float) -> None:
    """Raise ConnectError at once when the next worker's port cannot be reached (refused, no
    route, an unknown host), or after ``timeout_s`` when its host does not answer: ZMQ retries
    such a connect quietly, and the coordinator was told only when the handshake timed out."""
    host, port = parse_zmq_endpoint(endpoint)  # checked by _next_worker
    where = format_address(host, port)
    try:
        async with asyncio.timeout(timeout_s):
            _, writer = await asyncio.open_connection(host, port)
    except TimeoutError:
        raise ConnectError(
            f"{where} did not answer in {timeout_s:g} s: is that PC on, and is the port "
            "open in its firewall?"
        ) from None
    except ConnectionRefusedError:
        raise ConnectError(
            f"nothing listens at {where} (connection refused): is `fleetgui worker` "
            "running there, on that port?"
        ) from None
    except OSError as exc:  # no route to the host, a name that does not resolve
        raise ConnectError(f"cannot reach {where}: {exc.strerror or exc}") from None
    writer.close()
    with contextlib.suppress(OSError):
        await writer.wait_closed()
