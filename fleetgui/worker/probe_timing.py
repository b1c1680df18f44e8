"""Timing a probe stage on this PC's OpenVINO devices: what a PROFILE request asks and what the
worker (or the coordinator, for itself) measures.

A probe is one stage IR of an export (see :func:`fleetgui.fleet.profiling.probe_stage.choose_probe`
for which one and why): its files by sha256, its model file, how many decoder layers it holds and
whether it takes ``input_ids`` (a first stage) or ``hidden_in``. :func:`measure_probe` times it with
:func:`fleetgui.planner.device_bench.time_layer_ir` (OpenVINO and numpy only, as a worker has) on
each device and divides by its layers. Results are cached per probe files, device (and its full
name), OpenVINO version, compile properties and prefill length in a JSON file, so a
second request for the same probe measures nothing and needs no files.
"""

from __future__ import annotations

import hashlib
import json
import logging
import shutil
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from fleetgui.fsutil import atomic_write_text, read_cache_entries
from fleetgui.runtime.loader import safe_stage_config
from fleetgui.runtime.ov_stage import StageConfig
from fleetgui.worker.blob_store import BlobError, BlobStore, WantedFile, check_relative, check_sha

log = logging.getLogger(__name__)

CACHE_VERSION = 1
TIMINGS_FILE = "probe_timings.json"  # under data_dir()/planner on every PC
MAX_PROBE_FILES = 64
STAGE_DEVICE_PREFIXES = ("CPU", "GPU")  # stateful dynamic-shape stages run on these


class ProbeSpecError(ValueError):
    """A PROFILE request that does not describe a probe that can be timed."""


@dataclass(frozen=True, slots=True)
class ProbeSpec:
    """What a PROFILE message carries: the probe stage and how to time it."""

    model_file: str  # the IR among ``files`` (relative path, as in the export)
    files: tuple[WantedFile, ...]  # the IR's .xml and .bin
    n_layers: int  # decoder layers the IR holds (the time is divided by them)
    first: bool  # takes input_ids (else hidden_in)
    hidden_size: int
    weight_format: str
    devices: tuple[str, ...] = ()  # OpenVINO devices to time; empty: every CPU and GPU there
    threads: int = 0  # asked of a worker; its own --threads wins
    precision: str = "auto"  # asked of a worker; its own --precision wins unless auto
    past_tokens: int = 128  # prefilled positions before the timed decode steps
    warmup: int = 5
    steps: int = 20

    @property
    def key(self) -> str:
        """Names these probe files and timing settings (not the device)."""
        shas = sorted(f.sha256 for f in self.files)
        settings = [self.model_file, self.n_layers, self.first, self.past_tokens, self.warmup]
        text = json.dumps([shas, *settings, self.steps])
        return hashlib.sha256(text.encode()).hexdigest()[:32]

    def to_meta(self) -> dict[str, Any]:
        return {
            "model_file": self.model_file,
            "files": [{"path": f.path, "sha256": f.sha256, "size": f.size} for f in self.files],
            "n_layers": self.n_layers,
            "first": self.first,
            "hidden_size": self.hidden_size,
            "weight_format": self.weight_format,
            "devices": list(self.devices),
            "threads": self.threads,
            "precision": self.precision,
            "past_tokens": self.past_tokens,
            "warmup": self.warmup,
            "steps": self.steps,
        }

    @classmethod
    def from_meta(cls, meta: Mapping[str, Any]) -> ProbeSpec:
        """Parse and check a PROFILE meta; raise :class:`ProbeSpecError` naming the field."""
        try:
            raw_files = meta["files"]
            if not isinstance(raw_files, list) or not 0 < len(raw_files) <= MAX_PROBE_FILES:
                raise ProbeSpecError(f"'files' must be a list of 1 to {MAX_PROBE_FILES} files")
            files = tuple(
                WantedFile(str(check_relative(f["path"])), check_sha(f["sha256"]), int(f["size"]))
                for f in raw_files
            )
            model_file = str(meta["model_file"])
            if model_file not in {f.path for f in files}:
                raise ProbeSpecError("'model_file' must be one of 'files'")
            devices = meta.get("devices", [])
            if not isinstance(devices, list) or len(devices) > 16:
                raise ProbeSpecError("'devices' must be a list of at most 16 device names")
            spec = cls(
                model_file,
                files,
                _bounded(meta, "n_layers", 1, 100_000),
                bool(meta["first"]),
                _bounded(meta, "hidden_size", 1, 1 << 20),
                str(meta["weight_format"])[:10],
                tuple(str(d)[:40] for d in devices),
                _bounded(meta, "threads", 0, 1024, 0),
                str(meta.get("precision", "auto"))[:10],
                _bounded(meta, "past_tokens", 1, 8192, 128),
                _bounded(meta, "warmup", 0, 100, 5),
                _bounded(meta, "steps", 1, 1000, 20),
            )
        except (KeyError, TypeError, ValueError, BlobError) as exc:
            if isinstance(exc, ProbeSpecError):
                raise
            raise ProbeSpecError(f"malformed probe description: {exc!r}") from exc
        if spec.precision not in ("auto", "f32", "bf16", "f16"):
            raise ProbeSpecError(f"unknown precision {spec.precision!r}")
        return spec


def _bounded(
    meta: Mapping[str, Any], key: str, low: int, high: int, default: int | None = None
) -> int:
    value = meta[key] if default is None else meta.get(key, default)
    if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
        raise ProbeSpecError(f"'{key}' must be a whole number from {low} to {high}")
    return value


@dataclass(frozen=True)
class ProbeTimings:
    """What :func:`measure_probe` found (the PROFILE reply's meta, see :meth:`to_meta`)."""

    ms_per_layer: dict[str, float]  # by OpenVINO device
    memory_bytes: dict[str, int]  # what a stage on each device may use
    free_ram_bytes: int
    from_cache: bool  # every timing came from the cache: nothing was measured now
    failed: dict[str, str] = field(default_factory=dict)  # device -> why it could not be timed
    openvino: str = ""

    def to_meta(self) -> dict[str, Any]:
        return asdict(self)


def stage_devices() -> list[str]:
    """This PC's OpenVINO devices a stage can run on (CPU and GPUs), in name order."""
    import openvino as ov

    return sorted(d for d in ov.Core().available_devices if d.startswith(STAGE_DEVICE_PREFIXES))


def compile_properties(spec: ProbeSpec, device: str, base: StageConfig) -> dict[str, Any]:
    """The properties a stage of ``spec``'s weight format would be compiled with on ``device``."""
    config = StageConfig(device=device, threads=base.threads, precision=base.precision)
    return safe_stage_config(config, spec.weight_format).ov_properties()


class TimingCache:
    """Probe timings in a JSON file (see module doc); a damaged file reads as empty."""

    def __init__(self, path: Path) -> None:
        self.path = Path(path)

    def _entries(self) -> dict[str, Any]:
        return read_cache_entries(self.path, CACHE_VERSION)

    @staticmethod
    def key(spec: ProbeSpec, device: str, properties: Mapping[str, Any]) -> str:
        import openvino as ov

        name = str(ov.Core().get_property(device, "FULL_DEVICE_NAME"))
        props = json.dumps({k: str(v) for k, v in properties.items()}, sort_keys=True)
        return f"{spec.key}|{device}|{name}|openvino {ov.__version__}|{props}"

    def get(self, key: str) -> float | None:
        entry = self._entries().get(key)
        value = entry.get("ms_per_layer") if isinstance(entry, dict) else None
        return value if isinstance(value, float) and value > 0 else None

    def put(self, key: str, ms_per_layer: float) -> None:
        entries = self._entries()  # re-read: another process may have added entries meanwhile
        at = datetime.now(UTC).isoformat(timespec="seconds")
        entries[key] = {"ms_per_layer": ms_per_layer, "at": at}
        text = json.dumps({"version": CACHE_VERSION, "entries": entries}, indent=2) + "\n"
        atomic_write_text(self.path, text)


def cached_timings(
    spec: ProbeSpec, devices: Sequence[str], base: StageConfig, cache: TimingCache
) -> dict[str, float]:
    """The timings of ``devices`` the cache already holds (blocking: loads OpenVINO plugins)."""
    found: dict[str, float] = {}
    for device in devices:
        try:
            key = cache.key(spec, device, compile_properties(spec, device, base))
        except RuntimeError:  # no such device here: measure_probe says why
            continue
        if (value := cache.get(key)) is not None:
            found[device] = value
    return found


def measure_probe(
    xml: Path | None,
    spec: ProbeSpec,
    devices: Sequence[str],
    base: StageConfig,
    cache: TimingCache,
) -> ProbeTimings:
    """Time the probe IR ``xml`` on each of ``devices`` that the cache does not hold (blocking:
    run it in a thread). ``xml`` may be None when every timing is cached."""
    import openvino as ov
    import psutil

    from fleetgui.planner.device_bench import time_layer_ir, usable_memory

    timings: dict[str, float] = {}
    failed: dict[str, str] = {}
    measured_now = False
    for device in devices:
        try:
            properties = compile_properties(spec, device, base)
            key = cache.key(spec, device, properties)
            value = cache.get(key)
            if value is None:
                if xml is None:
                    raise BlobError("the probe files are not here")
                log.info("timing %s (%d layers) on %s", spec.model_file, spec.n_layers, device)
                value = time_layer_ir(
                    xml,
                    is_first=spec.first,
                    hidden_size=spec.hidden_size,
                    ov_device=device,
                    n_layers=spec.n_layers,
                    properties=properties,
                    past_tokens=spec.past_tokens,
                    warmup=spec.warmup,
                    steps=spec.steps,
                )
                cache.put(key, value)
                measured_now = True
                log.info("one layer of %s on %s: %.3f ms", spec.model_file, device, value)
            timings[device] = value
        except (RuntimeError, ValueError, BlobError) as exc:
            log.warning("cannot time %s on %s: %s", spec.model_file, device, exc)
            failed[device] = str(exc)[:500]
    memory: dict[str, int] = {}
    for device in timings:
        try:
            memory[device] = usable_memory(device)
        except RuntimeError as exc:
            log.warning("cannot read the memory of %s: %s", device, exc)
            memory[device] = int(psutil.virtual_memory().available)
    return ProbeTimings(
        timings,
        memory,
        int(psutil.virtual_memory().available),
        from_cache=bool(timings) and not measured_now,
        failed=failed,
        openvino=str(ov.__version__),
    )


def measure_stored_probe(
    store: BlobStore,
    spec: ProbeSpec,
    devices: Sequence[str],
    base: StageConfig,
    cache: TimingCache,
) -> ProbeTimings:
    """:func:`measure_probe` on a worker: the probe's files are linked out of ``store`` into a
    folder of their own (removed after) only when something must be measured; a missing file
    raises :class:`BlobError`."""
    if len(cached_timings(spec, devices, base, cache)) == len(devices):
        return measure_probe(None, spec, devices, base, cache)
    folder = store.materialize(f"probe-{spec.key[:24]}", spec.files)
    try:
        return measure_probe(folder / spec.model_file, spec, devices, base, cache)
    finally:
        shutil.rmtree(folder, ignore_errors=True)
