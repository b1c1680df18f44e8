"""The stages a worker runs: what a LOAD_STAGE message asks for, and the compiled result.

A worker may hold several consecutive stages of the model (after a failover it takes over a lost
neighbour's); it runs them one after another on each FORWARD, like the coordinator's
``LocalRoute``.
"""

from __future__ import annotations

import hashlib
import itertools
import json
import logging
import time
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any

import openvino as ov

from fleetgui.runtime.loader import safe_stage_config
from fleetgui.runtime.ov_stage import StageConfig
from fleetgui.runtime.route import LocalRoute
from fleetgui.runtime.stage_factory import CompiledStage, compile_stage
from fleetgui.shard import Shard
from fleetgui.worker.blob_store import (
    BlobError,
    BlobStore,
    WantedFile,
    check_relative,
    check_sha,
)

log = logging.getLogger(__name__)

MAX_STAGES_PER_WORKER = 256
WEIGHT_FORMATS = ("fp32", "fp16", "int8", "int4")


class LoadSpecError(ValueError):
    """A LOAD_STAGE request that does not describe loadable stages."""


@dataclass(frozen=True, slots=True)
class StageToLoad:
    """One stage a LOAD_STAGE asks a worker to load: its index in the export, its layers, its
    files and which of them are its IR models."""

    index: int
    shard: Shard
    model_files: tuple[str, ...]
    files: tuple[WantedFile, ...]

    def to_meta(self) -> dict[str, Any]:
        """The stage as a LOAD_STAGE meta describes it."""
        return {
            "index": self.index,
            "start_layer": self.shard.start_layer,
            "end_layer": self.shard.end_layer,
            "model_files": list(self.model_files),
            "files": [asdict(f) for f in self.files],
        }


@dataclass(frozen=True, slots=True)
class LoadSpec:
    """Everything a LOAD_STAGE message carries."""

    model_id: str
    n_layers: int
    weight_format: str
    stages: tuple[StageToLoad, ...]
    device: str = "CPU"
    threads: int = 0
    precision: str = "auto"
    paged: bool = False  # compile with paged attention (the coordinator checked the model)

    @property
    def indices(self) -> tuple[int, ...]:
        return tuple(stage.index for stage in self.stages)

    @property
    def key(self) -> str:
        """A folder-safe name for exactly these stages (files included)."""
        text = json.dumps(self.to_meta(), sort_keys=True)
        return (
            f"{self.stages[0].index}-{self.stages[-1].index}-"
            + hashlib.sha256(text.encode()).hexdigest()[:16]
        )

    @property
    def files(self) -> list[WantedFile]:
        unique: dict[str, WantedFile] = {}
        for stage in self.stages:
            for entry in stage.files:
                unique.setdefault(entry.path, entry)
        return list(unique.values())

    def to_meta(self) -> dict[str, Any]:
        return {**asdict(self), "stages": [stage.to_meta() for stage in self.stages]}

    @classmethod
    def from_meta(cls, meta: Mapping[str, Any]) -> LoadSpec:
        """Parse and check a LOAD_STAGE meta; raise :class:`LoadSpecError` naming the field."""
        try:
            stages_meta = meta["stages"]
            if (
                not isinstance(stages_meta, list)
                or not 0 < len(stages_meta) <= MAX_STAGES_PER_WORKER
            ):
                raise LoadSpecError("'stages' must be a non-empty list")
            model_id = str(meta["model_id"])[:300]
            n_layers = int(meta["n_layers"])
            stages = tuple(_stage_from(s, model_id, n_layers) for s in stages_meta)
            for before, after in itertools.pairwise(stages):
                if (
                    after.index != before.index + 1
                    or after.shard.start_layer != before.shard.end_layer
                ):
                    raise LoadSpecError("a worker's stages must be consecutive")
            weight_format = str(meta["weight_format"])
            if weight_format not in WEIGHT_FORMATS:
                raise LoadSpecError(f"unknown weight format {weight_format!r}")
            threads = int(meta.get("threads", 0))
            if not 0 <= threads <= 1024:
                raise LoadSpecError("'threads' is out of range")
            return cls(
                model_id,
                n_layers,
                weight_format,
                stages,
                str(meta.get("device", "CPU"))[:40],
                threads,
                str(meta.get("precision", "auto")),
                meta.get("paged") is True,
            )
        except BlobError as exc:  # a file path outside the stage folder, a bad sha256
            raise LoadSpecError(str(exc)) from None
        except (KeyError, TypeError, ValueError) as exc:
            if isinstance(exc, LoadSpecError):
                raise
            raise LoadSpecError(f"malformed stage description: {exc!r}") from exc


def _stage_from(data: Any, model_id: str, n_layers: int) -> StageToLoad:
    if not isinstance(data, dict):
        raise LoadSpecError("each stage must be an object")
    files = tuple(
        WantedFile(str(check_relative(f["path"])), check_sha(f["sha256"]), int(f["size"]))
        for f in data["files"]
    )
    names = {f.path for f in files}
    model_files = tuple(str(m) for m in data["model_files"])
    if not model_files or not set(model_files) <= names:
        raise LoadSpecError("a stage's model files must be among its files")
    start, end = int(data["start_layer"]), int(data["end_layer"])
    if not 0 <= start < end:
        raise LoadSpecError(f"bad layer range [{start}, {end})")
    if end > n_layers:
        raise LoadSpecError("a stage ends past the model's last layer")
    shard = Shard(model_id, start, end, n_layers)
    return StageToLoad(int(data["index"]), shard, model_files, files)


class HostedStages:
    """Compiled stages of one :class:`LoadSpec`, run in order."""

    def __init__(self, spec: LoadSpec, folder: Path, stages: Sequence[CompiledStage]) -> None:
        self.spec = spec
        self.folder = folder
        self.stages = list(stages)
        self.route = LocalRoute(self.stages)

    @property
    def is_first(self) -> bool:
        """Whether these stages start the model (they take token ids)."""
        return self.stages[0].is_first

    @property
    def is_last(self) -> bool:
        """Whether these stages end the model (they run the head)."""
        return self.stages[-1].is_last

    @classmethod
    def load(cls, spec: LoadSpec, store: BlobStore, config: StageConfig) -> HostedStages:
        """Link the stage files out of ``store`` and compile them (blocking: run in a thread)."""
        started = time.perf_counter()
        folder = store.materialize(spec.key, spec.files)
        config = replace(safe_stage_config(config, spec.weight_format), paged=spec.paged)
        core = ov.Core()
        stages = [
            compile_stage(
                stage.index,
                stage.shard,
                [folder / name for name in stage.model_files],
                config,
                core=core,
            )
            for stage in spec.stages
        ]
        log.info(
            "loaded stages %s of %s in %.1f s",
            list(spec.indices),
            spec.model_id,
            time.perf_counter() - started,
        )
        return cls(spec, folder, stages)

    async def release_all(self) -> None:
        for stage in self.stages:
            for stream_id in list(stage.stream_ids()):
                await stage.release(stream_id)
