"""Deployment: push the stage files each worker needs, then have it load them.

Files go in chunks, each acknowledged, so progress is exact and an interrupted upload resumes
where the worker's partial file ends. A worker that already has a file (by sha256) is sent
nothing. The worker checks each file's hash before it publishes it; a file that arrives damaged,
or that a later check finds damaged on the worker's disk, is sent again.
"""

from __future__ import annotations

import enum
import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from fleetgui.errors import FleetguiError
from fleetgui.export.manifest import FileEntry, Manifest
from fleetgui.fleet.ring.link import WorkerLink
from fleetgui.net.protocol import ErrorCode, Flags, Message, Op, RemoteError
from fleetgui.worker.blob_store import WantedFile
from fleetgui.worker.hosted_stages import LoadSpec, StageToLoad

log = logging.getLogger(__name__)

CHUNK_BYTES = 4 * 1024 * 1024
LOAD_TIMEOUT_S = 900.0


class DeployError(FleetguiError):
    """Shards could not be deployed to a worker."""


class DeployPhase(enum.StrEnum):
    """Where one worker's deployment is."""

    UPLOAD = "upload"  # sending the files it lacks
    LOAD = "load"  # loading (compiling) its stages
    READY = "ready"


@dataclass(frozen=True, slots=True)
class DeployProgress:
    """Bytes of one worker's files sent so far (``total`` counts only what must be sent)."""

    worker: str
    sent: int
    total: int
    file: str = ""
    phase: DeployPhase = DeployPhase.UPLOAD

    @property
    def fraction(self) -> float:
        return 1.0 if self.total == 0 else self.sent / self.total


ProgressCallback = Callable[[DeployProgress], None]


def stage_files(manifest: Manifest, indices: Sequence[int]) -> list[FileEntry]:
    """The files of the given stages, each once."""
    unique: dict[str, FileEntry] = {}
    for index in indices:
        for entry in manifest.stages[index].files:
            unique.setdefault(entry.sha256, entry)
    return list(unique.values())


def load_meta(
    manifest: Manifest,
    indices: Sequence[int],
    *,
    device: str = "CPU",
    threads: int = 0,
    precision: str = "auto",
    paged: bool = False,
) -> dict[str, Any]:
    """The LOAD_STAGE meta for ``indices`` (consecutive stages) of ``manifest``: the
    :class:`~fleetgui.worker.hosted_stages.LoadSpec` the worker parses it back into."""
    stages = tuple(
        StageToLoad(
            i,
            manifest.shard(i),
            manifest.stages[i].model_files,
            tuple(WantedFile(f.path, f.sha256, f.size) for f in manifest.stages[i].files),
        )
        for i in indices
    )
    spec = LoadSpec(
        manifest.model_id,
        manifest.n_layers,
        manifest.weight_format,
        stages,
        device=device,
        threads=threads,
        precision=precision,
        paged=paged,
    )
    return spec.to_meta()


async def push_files(
    link: WorkerLink,
    export_dir: Path,
    files: Sequence[FileEntry],
    progress: ProgressCallback | None = None,
    *,
    chunk_bytes: int = CHUNK_BYTES,
) -> int:
    """Send the worker the files it lacks; returns the bytes sent."""
    reply = await link.call(
        Message(
            Op.HAVE_FILES, meta={"files": [{"sha256": f.sha256, "size": f.size} for f in files]}
        )
    )
    have = set(reply.meta.get("have", []))
    received = {str(k): int(v) for k, v in dict(reply.meta.get("received", {})).items()}
    todo = [f for f in files if f.sha256 not in have]
    total = sum(f.size - received.get(f.sha256, 0) for f in todo)
    sent = 0
    log.info(
        "worker %s: %d of %d files to send (%.1f MB)", link.name, len(todo), len(files), total / 1e6
    )
    for entry in todo:
        for attempt in range(2):
            offset = received.get(entry.sha256, 0) if attempt == 0 else 0
            try:
                sent += await _push_one(
                    link,
                    Path(export_dir),
                    entry,
                    offset,
                    chunk_bytes=chunk_bytes,
                    progress=progress,
                    sent_before=sent,
                    total=total,
                )
                break
            except RemoteError as exc:
                if exc.code != ErrorCode.BAD_HASH or attempt == 1:
                    raise DeployError(
                        f"sending {entry.path} to worker {link.name!r} failed: {exc}"
                    ) from exc
                log.warning("%s arrived damaged at %s; sending it again", entry.path, link.name)
                total += entry.size
    if progress:
        progress(DeployProgress(link.name, total, total, phase=DeployPhase.UPLOAD))
    return sent


async def _push_one(
    link: WorkerLink,
    export_dir: Path,
    entry: FileEntry,
    offset: int,
    *,
    chunk_bytes: int,
    progress: ProgressCallback | None,
    sent_before: int,
    total: int,
) -> int:
    path = export_dir / entry.path
    if not path.is_file() or path.stat().st_size != entry.size:
        raise DeployError(f"{path} is missing or changed since the export: export the model again")
    sent = 0
    with open(path, "rb") as handle:
        handle.seek(offset)
        while True:
            data = handle.read(chunk_bytes)
            final = offset + len(data) >= entry.size
            meta = {"sha256": entry.sha256, "size": entry.size, "offset": offset}
            message = Message(
                Op.PUT_CHUNK,
                flags=Flags.FINAL if final else Flags.NONE,
                meta=meta,
                tensors=(np.frombuffer(data, dtype=np.uint8),),
            )
            await link.call(message)
            offset += len(data)
            sent += len(data)
            if progress:
                progress(DeployProgress(link.name, sent_before + sent, total, entry.path))
            if final:
                return sent


async def load_stages(
    link: WorkerLink,
    export_dir: Path,
    manifest: Manifest,
    indices: Sequence[int],
    progress: ProgressCallback | None = None,
    **config: Any,
) -> dict[str, Any]:
    """Push what the worker lacks and have it compile ``indices``; re-send files it reports
    missing or damaged once."""
    files = stage_files(manifest, indices)
    meta = load_meta(manifest, indices, **config)
    for attempt in range(2):
        await push_files(link, export_dir, files, progress)
        if progress:
            progress(DeployProgress(link.name, 0, 0, phase=DeployPhase.LOAD))
        try:
            reply = await link.call(Message(Op.LOAD_STAGE, meta=meta), timeout_s=LOAD_TIMEOUT_S)
        except RemoteError as exc:
            if exc.code == ErrorCode.MISSING_FILES and attempt == 0:
                log.warning("worker %s lacks files at load time; sending them again", link.name)
                continue
            raise DeployError(
                f"worker {link.name!r} could not load stages {list(indices)}: {exc}"
            ) from exc
        if progress:
            progress(DeployProgress(link.name, 1, 1, phase=DeployPhase.READY))
        return dict(reply.meta)
    raise DeployError(f"worker {link.name!r} kept reporting missing files")
