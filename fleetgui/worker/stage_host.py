"""A worker's shard files and the stages compiled from them.

The worker agent hands HAVE_FILES, PUT_CHUNK, LOAD_STAGE, UNLOAD and PROFILE here and sends back
what these methods return; a request they cannot serve raises
:class:`~fleetgui.net.protocol.RefusedError` naming the cause (and, in its meta, e.g. which files
are missing), so the coordinator is always told why. One lock (``compute``) runs one stage
computation at a time, in arrival order; loading, unloading and profiling take it too, so a
stage is never swapped or timed under a running request.
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import logging
import time
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from fleetgui.net.protocol import ErrorCode, Flags, Message, RefusedError
from fleetgui.paths import data_dir
from fleetgui.runtime.ov_stage import StageConfig
from fleetgui.worker.blob_store import BlobError, BlobStore, DiskFullError
from fleetgui.worker.hosted_stages import HostedStages, LoadSpec, LoadSpecError
from fleetgui.worker.probe_timing import (
    TIMINGS_FILE,
    ProbeSpec,
    ProbeSpecError,
    TimingCache,
    cached_timings,
    measure_stored_probe,
    stage_devices,
)

if TYPE_CHECKING:
    from fleetgui.worker.agent import WorkerConfig

log = logging.getLogger(__name__)

_DISK_FULL = (errno.ENOSPC, errno.EDQUOT)
MAX_LISTED_FILES = 100_000  # a HAVE_FILES longer than this is refused


class StageHost:
    """The shard store, the loaded stages (``hosted``) and the compute lock of one worker."""

    def __init__(self, config: WorkerConfig) -> None:
        self.config = config
        self.store = BlobStore(config.cache_dir)
        self.hosted: HostedStages | None = None
        self.compute = asyncio.Lock()  # one stage computation at a time, in arrival order
        self._timings = TimingCache(config.timings_file or data_dir() / "planner" / TIMINGS_FILE)

    # -- files ----------------------------------------------------------------------------------

    async def have_files(self, files: object) -> dict[str, Any]:
        """Which of ``files`` (``[{"sha256", "size"}]``) are here, and how much of the others
        an interrupted upload left."""
        if not isinstance(files, list) or len(files) > MAX_LISTED_FILES:
            raise RefusedError(ErrorCode.BAD_FIELD, "'files' must be a list")
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
            raise RefusedError(ErrorCode.BAD_FIELD, f"bad file entry: {exc}") from None
        return {"have": have, "received": received}

    async def put_chunk(self, message: Message) -> dict[str, Any]:
        """Write one chunk of a file; the last one (FINAL) checks the file's hash."""
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
            raise RefusedError(code, str(exc), received=held) from None
        except (KeyError, TypeError, ValueError) as exc:
            raise RefusedError(ErrorCode.BAD_FIELD, f"bad chunk: {exc!r}") from None
        return {"received": held, "complete": complete}

    # -- stages ---------------------------------------------------------------------------------

    def stage_config(self, threads: int, precision: str, device: str = "CPU") -> StageConfig:
        """How to compile what a coordinator asked for: the worker's own ``--device``,
        ``--threads`` and ``--precision`` (unless auto) win over the request's."""
        return StageConfig(
            device=self.config.device or device,
            threads=self.config.threads or threads,
            precision=precision if self.config.precision == "auto" else self.config.precision,
        )

    async def load(self, meta: Mapping[str, Any]) -> dict[str, Any]:
        """Compile the stages a LOAD_STAGE names (or keep them, when loaded already)."""
        try:
            spec = LoadSpec.from_meta(meta)
        except LoadSpecError as exc:
            raise RefusedError(ErrorCode.BAD_FIELD, str(exc)) from None
        if self.hosted is not None and self.hosted.spec == spec:
            return {"compile_s": 0.0, "reused": True}
        missing = [f.sha256 for f in spec.files if not self.store.has(f.sha256, f.size)]
        if missing:
            text = f"{len(missing)} shard file(s) are missing or damaged: deploy them first"
            raise RefusedError(ErrorCode.MISSING_FILES, text, missing=missing)
        config = self.stage_config(spec.threads, spec.precision, spec.device)
        started = time.perf_counter()
        async with self.compute:
            await self.drop()
            self.hosted = await self._compile(spec, config)
        return {"compile_s": time.perf_counter() - started, "reused": False}

    async def _compile(self, spec: LoadSpec, config: StageConfig) -> HostedStages:
        indices = list(spec.indices)
        try:
            return await asyncio.to_thread(HostedStages.load, spec, self.store, config)
        except BlobError as exc:
            raise RefusedError(ErrorCode.MISSING_FILES, str(exc), missing=[]) from None
        except OSError as exc:  # linking the stage folder: a read-only or full cache
            log.warning("loading stages %s failed on the cache: %s", indices, exc)
            text = (
                f"could not load stages {indices}: the worker's shard cache "
                f"{self.config.cache_dir} failed ({exc}): "
                + ("free some space" if exc.errno in _DISK_FULL else "make it writable")
                + " there, or start the worker with another --cache"
            )
            raise RefusedError(ErrorCode.STAGE_FAILED, text) from None
        except Exception as exc:  # OpenVINO compile errors: tell the coordinator why
            log.exception("loading stages %s failed", indices)
            text = f"could not load stages {indices}: {exc}"
            raise RefusedError(ErrorCode.STAGE_FAILED, text) from None

    async def drop(self) -> None:
        """Close the loaded stages (the caller holds ``compute``)."""
        if self.hosted is not None:
            await self.hosted.route.close()
            self.hosted = None

    async def unload(self) -> None:
        async with self.compute:
            await self.drop()

    # -- profiling ------------------------------------------------------------------------------

    async def profile(self, meta: Mapping[str, Any]) -> dict[str, Any]:
        """Time the probe stage a PROFILE names on this PC's devices (cached on disk)."""
        try:
            spec = ProbeSpec.from_meta(meta)
        except ProbeSpecError as exc:
            raise RefusedError(ErrorCode.BAD_FIELD, str(exc)) from None
        base = self.stage_config(spec.threads, spec.precision)
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
                raise RefusedError(ErrorCode.MISSING_FILES, text, missing=missing)
        async with self.compute:  # never while a stage computes, and never two at once
            try:
                result = await asyncio.to_thread(
                    measure_stored_probe, self.store, spec, devices, base, self._timings
                )
            except BlobError as exc:
                raise RefusedError(ErrorCode.MISSING_FILES, str(exc), missing=[]) from None
        if not result.ms_per_layer:
            why = "; ".join(f"{d}: {reason}" for d, reason in result.failed.items())
            text = f"worker {self.config.name!r} could not time the probe: {why or 'no device'}"
            raise RefusedError(ErrorCode.STAGE_FAILED, text)
        return {**result.to_meta(), "stage_device": self.config.device or "CPU"}
