"""Measured layer times for the planner: a probe stage of the export, timed on each PC.

Which stage is timed (:func:`choose_probe`): one of the export's own stage IRs, the one with the
fewest decoder layers among those that hold neither the embedding nor the head, divided by its
layer count. It is a real stage of the very model, at its weight format, exported with the same
options, so the time is what a stage of it costs on that PC; a worker needs no torch (it cannot
export anything: its bundle has no torch or transformers), and the coordinator needs no
HuggingFace folder (an export does not keep one). A stage of several layers also spreads one
inference call's fixed overhead over them, as the planned stages will. When every stage holds the
embedding or the head (exports of one or two stages), a first stage is taken (looking up one
token's embedding costs next to nothing), else the only stage, whose head makes the per-layer
figure err slow on every PC alike. Its files are the export's, so they travel with the
content-addressed deployment (:func:`fleetgui.fleet.ring.shard_push.push_files`): a worker that has
them, from an earlier profile or deployment, is sent nothing, and one that gets this stage later
already holds it.

:func:`profile_worker` asks a worker (PROFILE), sending the files only when it says they are
missing; the worker times the probe on its CPU and GPUs and caches the result
(:mod:`fleetgui.worker.probe_timing`). :func:`profile_here` times the same probe on this PC.
"""

from __future__ import annotations

import logging
import math
import re
import socket
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from fleetgui.errors import FleetguiError
from fleetgui.export.manifest import FileEntry, Manifest, read_manifest
from fleetgui.fleet.ring.link import WorkerLink
from fleetgui.fleet.ring.shard_push import ProgressCallback, push_files
from fleetgui.net.protocol import ErrorCode, Message, Op, RemoteError
from fleetgui.paths import data_dir
from fleetgui.planner.profiles import ComputeProfile, DeviceProfile, MachineProfile
from fleetgui.runtime.ov_stage import StageConfig
from fleetgui.shard import Shard
from fleetgui.worker.blob_store import WantedFile
from fleetgui.worker.probe_timing import TIMINGS_FILE, ProbeSpec, TimingCache, measure_probe

log = logging.getLogger(__name__)

PROFILE_TIMEOUT_S = 600.0  # a probe stage of a large model compiles and runs for a while
UNMEASURED_DISK_BYTES_PER_S = 1e9  # workers do not time their disk: the planner's load estimate
_PART_NAME = re.compile(r"(?:^|/)stage_(\d+)-(\d+)\.xml$")


class ProfileError(FleetguiError):
    """A PC's layer time could not be measured; the message says why and what to do."""


@dataclass(frozen=True)
class ProbeShard:
    """The stage IR of an export that every PC times (see the module doc)."""

    root: Path  # the export folder the files are relative to
    shard: Shard  # the layers the IR runs
    model_file: str  # the IR (.xml) among ``files``
    files: tuple[FileEntry, ...]  # its .xml and .bin
    hidden_size: int
    weight_format: str

    def spec(self, devices: Sequence[str] = (), **timing: Any) -> ProbeSpec:
        """The PROFILE request for this probe (``timing``: ProbeSpec's timing fields)."""
        return ProbeSpec(
            self.model_file,
            tuple(WantedFile(f.path, f.sha256, f.size) for f in self.files),
            self.shard.n_stage_layers,
            self.shard.is_first,
            self.hidden_size,
            self.weight_format,
            tuple(devices),
            **timing,
        )

    def __str__(self) -> str:
        shard = self.shard
        if shard.n_stage_layers == 1:
            return f"{self.model_file} (layer {shard.start_layer})"
        return f"{self.model_file} (layers {shard.start_layer}-{shard.end_layer - 1})"


def probe_candidates(export_dir: Path, manifest: Manifest) -> list[ProbeShard]:
    """Every single IR of the export as a probe: a stage's one model, or each part of a stage
    exported in chunks (its parts are named by layer range)."""
    found: list[ProbeShard] = []
    for stage, shard in zip(manifest.stages, manifest.shards, strict=True):
        by_path = {f.path: f for f in stage.files}
        models = stage.model_files
        for model in models:
            if len(models) == 1:
                start, end = shard.start_layer, shard.end_layer
            elif match := _PART_NAME.search(model):
                start, end = int(match[1]), int(match[2])
            else:
                continue
            weights = by_path.get(model[: -len(".xml")] + ".bin")
            if model not in by_path or weights is None or not 0 <= start < end <= shard.n_layers:
                continue
            found.append(
                ProbeShard(
                    Path(export_dir),
                    replace(shard, start_layer=start, end_layer=end),
                    model,
                    (by_path[model], weights),
                    manifest.hidden_size,
                    manifest.weight_format,
                )
            )
    return found


def choose_probe(export_dir: Path) -> ProbeShard:
    """The export's stage IR to time (see the module doc): no head, then no embedding, then the
    fewest layers, then the earliest; :class:`ProfileError` for an export that has none (a
    monolithic one)."""
    manifest = read_manifest(export_dir)
    stages = manifest.layout == "stages"
    candidates = probe_candidates(Path(export_dir), manifest) if stages else []
    if not candidates:
        raise ProfileError(
            f"{Path(export_dir).name} has no stage IR to time (layout {manifest.layout!r}): "
            "export it in stages (`fleetgui export --stages 2` or more)"
        )
    return min(
        candidates,
        key=lambda p: (
            p.shard.is_last,
            p.shard.is_first,
            p.shard.n_stage_layers,
            p.shard.start_layer,
        ),
    )


@dataclass(frozen=True)
class WorkerProfile:
    """What one PC measured for a probe."""

    machine: MachineProfile  # one ComputeProfile per device timed
    stage_device: str  # the OpenVINO device its stages run on
    from_cache: bool  # it measured nothing now: every timing came from its cache
    bytes_sent: int = 0  # probe file bytes sent to it first
    failed: Mapping[str, str] = field(default_factory=dict)  # device -> why it was not timed

    def device_profile(self) -> DeviceProfile:
        """The planner's view of the PC on the device its stages run on; :class:`ProfileError`
        if that one could not be timed."""
        try:
            return self.machine.device_profile(self.stage_device)
        except ValueError:
            why = self.failed.get(self.stage_device, "it was not timed")
            raise ProfileError(
                f"{self.machine.name} runs stages on {self.stage_device}, which could not be "
                f"timed: {why}"
            ) from None


def _profile_from(
    name: str,
    probe: ProbeShard,
    meta: Mapping[str, Any],
    *,
    disk_read_bytes_per_s: float,
    rtt_ms: float | None,
    bytes_sent: int,
) -> WorkerProfile:
    try:
        timings = {str(k): float(v) for k, v in dict(meta["ms_per_layer"]).items()}
        memory = {str(k): int(v) for k, v in dict(meta.get("memory_bytes", {})).items()}
        free = int(meta["free_ram_bytes"])
        failed = {str(k): str(v) for k, v in dict(meta.get("failed", {})).items()}
        stage_device = str(meta.get("stage_device", "CPU"))
    except (KeyError, TypeError, ValueError) as exc:
        raise ProfileError(f"{name} sent a malformed PROFILE reply: {exc!r}") from exc
    bad = [d for d, ms in timings.items() if not (math.isfinite(ms) and ms > 0)]
    if bad or not timings:
        raise ProfileError(f"{name} reported no usable layer time ({timings})")
    compute = tuple(
        ComputeProfile(device, timings[device], memory.get(device) or free)
        for device in sorted(timings)
    )
    machine = MachineProfile(
        name,
        probe.shard.model_id,
        probe.weight_format,
        compute,
        free,
        disk_read_bytes_per_s,
        rtt_ms,
    )
    return WorkerProfile(machine, stage_device, bool(meta.get("from_cache")), bytes_sent, failed)


async def profile_worker(
    link: WorkerLink,
    probe: ProbeShard,
    *,
    devices: Sequence[str] = (),
    progress: ProgressCallback | None = None,
    timeout_s: float = PROFILE_TIMEOUT_S,
    disk_read_bytes_per_s: float = UNMEASURED_DISK_BYTES_PER_S,
    **timing: Any,
) -> WorkerProfile:
    """Have the worker on ``link`` (opened) time ``probe`` on ``devices`` (default: its CPU and
    GPUs). It answers from its cache when it can; else the files it lacks are sent once
    (``progress`` as for a deployment) and it measures. Raises :class:`ProfileError`."""
    if "PROFILE" not in link.hello.get("ops", ()):
        version = link.hello.get("info", {}).get("version", "?")
        raise ProfileError(
            f"worker {link.name!r} runs fleetgui {version}, which cannot measure layer times: "
            "update it to this coordinator's version"
        )
    message = Message(Op.PROFILE, meta=probe.spec(devices, **timing).to_meta())
    sent = 0
    for attempt in range(2):
        try:
            reply = await link.call(message, timeout_s=timeout_s)
        except RemoteError as exc:
            if exc.code != ErrorCode.MISSING_FILES or attempt == 1:
                raise ProfileError(f"worker {link.name!r} could not time {probe}: {exc}") from exc
            log.info("worker %s lacks the probe %s: sending it", link.name, probe)
            sent += await push_files(link, probe.root, probe.files, progress)
            continue
        profile = _profile_from(
            link.name,
            probe,
            reply.meta,
            disk_read_bytes_per_s=disk_read_bytes_per_s,
            rtt_ms=link.rtt_ms,
            bytes_sent=sent,
        )
        log.info(
            "worker %s: %s ms per layer%s",
            link.name,
            ", ".join(f"{c.ov_device} {c.ms_per_layer:.3f}" for c in profile.machine.compute),
            " (its cache)" if profile.from_cache else "",
        )
        return profile
    raise ProfileError(f"worker {link.name!r} kept reporting the probe files missing")


def default_timings_file() -> Path:
    return data_dir() / "planner" / TIMINGS_FILE


def profile_here(
    probe: ProbeShard,
    config: StageConfig,
    *,
    name: str | None = None,
    timings_file: Path | None = None,
    disk_read_bytes_per_s: float = UNMEASURED_DISK_BYTES_PER_S,
    **timing: Any,
) -> WorkerProfile:
    """Time ``probe`` on this PC's ``config.device``, compiled as ``config`` compiles local
    stages, cached in ``timings_file`` (blocking: run it in an executor)."""
    spec = probe.spec((config.device,), **timing)
    cache = TimingCache(timings_file or default_timings_file())
    result = measure_probe(probe.root / probe.model_file, spec, spec.devices, config, cache)
    if not result.ms_per_layer:
        why = "; ".join(f"{d}: {r}" for d, r in result.failed.items())
        raise ProfileError(f"this PC could not time {probe}: {why}")
    return _profile_from(
        name or socket.gethostname(),
        probe,
        {**result.to_meta(), "stage_device": config.device},
        disk_read_bytes_per_s=disk_read_bytes_per_s,
        rtt_ms=0.0,
        bytes_sent=0,
    )
