"""Measure a PC for the planner: time of one real decoder layer per OpenVINO device, free memory
and disk read speed.

The layer time comes from a 1-layer shard of the model itself (layer 1, a middle layer, when the
model has three or more), exported with ``convert_stage`` and compressed to the weight format,
then timed by :func:`time_layer_ir`: compiled on the device, a prefill of ``past_tokens``
positions and a few warm-up steps, then the trimmed mean of single-token decode steps
(:func:`sustained_ms`) is the ``ms_per_layer``. It includes one inference call's fixed overhead,
which a stage of many layers pays once, so it errs on the slow side. Results are cached per model,
weight format, device and OpenVINO version in ``data_dir()/planner/layer_timings.json``: the
second call for the same combination does not measure again.

:func:`time_layer_ir` needs no torch: a worker times the stage IR a coordinator sends it with it
(:mod:`fleetgui.worker.probe_timing`).
"""

from __future__ import annotations

import json
import logging
import os
import socket
import statistics
import tempfile
import time
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from fleetgui.fsutil import atomic_write_text, read_cache_entries
from fleetgui.paths import data_dir
from fleetgui.planner.profiles import ComputeProfile, MachineProfile

log = logging.getLogger(__name__)

CACHE_VERSION = 2  # 2: trimmed mean instead of the median (see sustained_ms)
_DISK_CHUNK = 4 * 1024 * 1024


@dataclass(frozen=True)
class LayerTiming:
    """One measured (or cached) layer time."""

    model_id: str
    weight_format: str
    ov_device: str
    ms_per_layer: float
    measured_at: str  # ISO time of the measurement
    from_cache: bool  # True when read from the cache instead of measured now


def cache_path() -> Path:
    return data_dir() / "planner" / "layer_timings.json"


def _read_cache(path: Path) -> dict[str, Any]:
    return read_cache_entries(path, CACHE_VERSION)


def _cache_key(model_id: str, weight_format: str, ov_device: str, device_name: str) -> str:
    import openvino as ov

    return f"{model_id}|{weight_format}|{ov_device}|{device_name}|openvino {ov.__version__}"


def sustained_ms(times: list[float], trim: float = 0.1) -> float:
    """The time per step a long run sees: the mean of ``times`` without the ``trim`` fraction at
    each end.

    Not the median: a PC whose CPU is shared in time slices (a CPU quota, other busy programs)
    throttles only some of the short steps, e.g. one in three 1.4 ms steps waits 2 ms under a
    50% quota with a 4 ms period. The median then reports the unthrottled 1.4 ms while a stage of
    many layers runs at half speed; measured on a loopback fleet, the median put a throttled
    worker at 1.4-1.9 ms per layer and its stages ran at 3-4 ms per layer. Trimming drops single
    hiccups (a page fault, a timer interrupt) without hiding throttling, which hits many steps.
    """
    if not times:
        raise ValueError("no step times")
    if not 0.0 <= trim < 0.5:
        raise ValueError("trim must be in [0, 0.5)")
    ordered = sorted(times)
    cut = int(len(ordered) * trim)
    kept = ordered[cut : len(ordered) - cut]
    return statistics.fmean(kept)


def time_layer_ir(
    xml_path: Path,
    *,
    is_first: bool,
    hidden_size: int,
    ov_device: str = "CPU",
    n_layers: int = 1,
    properties: Mapping[str, Any] | None = None,
    past_tokens: int = 128,
    warmup: int = 5,
    steps: int = 20,
) -> float:
    """Sustained decode-step time per layer (ms) of an exported stage IR on ``ov_device``.

    Needs only OpenVINO and numpy (a worker runs it): ``xml_path`` is a stage (or a 1-layer
    shard) as the exporter writes it, stateful, taking ``input_ids`` when ``is_first`` else
    ``hidden_in`` of ``hidden_size``. It is compiled with ``properties`` (default: the latency
    hint), prefilled with ``past_tokens`` positions, run ``warmup`` single-token steps, then
    ``steps`` timed ones; the :func:`sustained_ms` of those, divided by ``n_layers`` (the layers
    the IR holds), is returned.
    """
    import numpy as np
    import openvino as ov

    if n_layers < 1 or past_tokens < 1 or steps < 1 or warmup < 0 or hidden_size < 1:
        raise ValueError("n_layers, past_tokens, steps and hidden_size must be positive")
    compiled = ov.Core().compile_model(
        str(xml_path), ov_device, dict(properties or {"PERFORMANCE_HINT": "LATENCY"})
    )
    names = {name for port in compiled.inputs for name in port.get_names()}
    main = "input_ids" if is_first else "hidden_in"
    if main not in names:
        raise ValueError(f"{Path(xml_path).name} has no {main} input (inputs: {sorted(names)})")
    request = compiled.create_infer_request()
    total = past_tokens + warmup + steps + 1
    mask = np.ones((1, total), dtype=np.int64)
    rng = np.random.default_rng(0)

    def main_input(n: int) -> Any:
        if is_first:
            return np.full((1, n), 3, dtype=np.int64)
        return rng.standard_normal((1, n, hidden_size), dtype=np.float32)

    extra: dict[str, Any] = {"beam_idx": np.zeros(1, dtype=np.int32)} if "beam_idx" in names else {}
    request.reset_state()
    request.infer(
        {
            main: main_input(past_tokens),
            "attention_mask": mask[:, :past_tokens],
            "position_ids": np.arange(past_tokens, dtype=np.int64)[None, :],
            **extra,
        }
    )
    feed: dict[str, Any] = {main: main_input(1), **extra}
    times: list[float] = []
    for step in range(warmup + steps):
        position = past_tokens + step
        feed["attention_mask"] = mask[:, : position + 1]
        feed["position_ids"] = np.array([[position]], dtype=np.int64)
        started = time.perf_counter()
        request.infer(feed)
        if step >= warmup:
            times.append(1000.0 * (time.perf_counter() - started))
    del request, compiled
    return sustained_ms(times) / n_layers


def _time_layer(
    model_dir: Path,
    weight_format: str,
    ov_device: str,
    *,
    past_tokens: int,
    warmup: int,
    steps: int,
) -> tuple[str, float]:
    """(model_id, sustained decode-step ms) of a real 1-layer shard on ``ov_device``: exported
    here (torch), then timed by :func:`time_layer_ir`."""
    from fleetgui.export.compression import compress_weights, save_compressed
    from fleetgui.export.model_source import open_model_source
    from fleetgui.export.stage_export import convert_stage
    from fleetgui.shard import Shard

    source = open_model_source(model_dir)
    layer = 1 if source.n_layers > 2 else 0
    shard = Shard(source.model_id, layer, layer + 1, source.n_layers)
    model = compress_weights(convert_stage(model_dir, shard), weight_format)
    with tempfile.TemporaryDirectory(prefix="fleetgui-layer-") as tmp:
        xml = Path(tmp) / "layer.xml"
        save_compressed(model, str(xml), weight_format)
        del model
        ms = time_layer_ir(
            xml,
            is_first=shard.is_first,
            hidden_size=source.hidden_size,
            ov_device=ov_device,
            past_tokens=past_tokens,
            warmup=warmup,
            steps=steps,
        )
    return source.model_id, ms


def measure_layer_ms(
    model_dir: Path,
    weight_format: str,
    ov_device: str = "CPU",
    *,
    cache_file: Path | None = None,
    refresh: bool = False,
    past_tokens: int = 128,
    warmup: int = 5,
    steps: int = 20,
) -> LayerTiming:
    """``ms_per_layer`` of the model's kind of layer at ``weight_format`` on ``ov_device``.

    Cached (see the module docstring); ``refresh`` measures again and replaces the cache entry.
    """
    import openvino as ov

    from fleetgui.export.model_source import open_model_source

    path = cache_file or cache_path()
    model_id = open_model_source(model_dir).model_id
    device_name = str(ov.Core().get_property(ov_device, "FULL_DEVICE_NAME"))
    key = _cache_key(model_id, weight_format, ov_device, device_name)
    entries = _read_cache(path)
    cached = entries.get(key)
    if not refresh and isinstance(cached, dict) and isinstance(cached.get("ms_per_layer"), float):
        log.debug("layer time of %s from the cache: %.3f ms", key, cached["ms_per_layer"])
        return LayerTiming(
            model_id, weight_format, ov_device, cached["ms_per_layer"], cached["at"], True
        )
    log.info("timing one %s layer of %s on %s", weight_format, model_id, ov_device)
    _, ms = _time_layer(
        model_dir, weight_format, ov_device, past_tokens=past_tokens, warmup=warmup, steps=steps
    )
    at = datetime.now(UTC).isoformat(timespec="seconds")
    entries = _read_cache(path)  # re-read: another process may have added entries meanwhile
    entries[key] = {"ms_per_layer": ms, "at": at, "past_tokens": past_tokens, "steps": steps}
    atomic_write_text(
        path, json.dumps({"version": CACHE_VERSION, "entries": entries}, indent=2) + "\n"
    )
    log.info("one %s layer on %s: %.3f ms per decode step", weight_format, ov_device, ms)
    return LayerTiming(model_id, weight_format, ov_device, ms, at, False)


def measure_disk_read(folder: Path, size_bytes: int = 64 * 1024 * 1024) -> float:
    """Sequential read speed (bytes/s) of the disk holding ``folder``.

    Writes a scratch file, asks the OS to drop it from the page cache (where it can) and reads it
    back; where the cache cannot be dropped the figure is the cache's speed.
    """
    folder.mkdir(parents=True, exist_ok=True)
    fd, name = tempfile.mkstemp(prefix=".fleetgui-disk-", dir=folder)
    try:
        block = os.urandom(_DISK_CHUNK)
        with os.fdopen(fd, "wb") as handle:
            for _ in range(max(1, size_bytes // _DISK_CHUNK)):
                handle.write(block)
            handle.flush()
            os.fsync(handle.fileno())
        if hasattr(os, "posix_fadvise"):
            with open(name, "rb") as handle:
                os.posix_fadvise(handle.fileno(), 0, 0, os.POSIX_FADV_DONTNEED)
        started = time.perf_counter()
        read = 0
        with open(name, "rb", buffering=0) as handle:
            while chunk := handle.read(_DISK_CHUNK):
                read += len(chunk)
        elapsed = max(time.perf_counter() - started, 1e-6)
    finally:
        Path(name).unlink(missing_ok=True)
    return read / elapsed


def usable_memory(ov_device: str) -> int:
    """Memory a stage on ``ov_device`` may use: available RAM, or the GPU's memory (capped by
    available RAM for an integrated GPU, which shares it)."""
    import psutil

    available = int(psutil.virtual_memory().available)
    if not ov_device.startswith("GPU"):
        return available
    import openvino as ov

    core = ov.Core()
    total = int(core.get_property(ov_device, "GPU_DEVICE_TOTAL_MEM_SIZE"))
    kind = str(core.get_property(ov_device, "DEVICE_TYPE")).lower()
    return min(total, available) if "integrated" in kind else total


def profile_machine(
    model_dir: Path,
    weight_format: str,
    *,
    name: str | None = None,
    ov_devices: list[str] | None = None,
    disk_folder: Path | None = None,
    disk_bytes: int = 64 * 1024 * 1024,
    cache_file: Path | None = None,
) -> MachineProfile:
    """Measure this PC for ``model_dir`` at ``weight_format`` on each OpenVINO device
    (default: every available one). Link fields are left for the fleet code to fill in."""
    import openvino as ov
    import psutil

    from fleetgui.paths import shards_cache_dir

    devices = ov_devices if ov_devices is not None else sorted(ov.Core().available_devices)
    compute: list[ComputeProfile] = []
    model_id = ""
    for device in devices:
        if device.startswith(("NPU", "HETERO", "AUTO", "MULTI", "BATCH")):
            continue  # stateful dynamic-shape stages run on CPU and GPU
        try:
            timing = measure_layer_ms(model_dir, weight_format, device, cache_file=cache_file)
        except RuntimeError as exc:
            log.warning("cannot time a layer on %s: %s", device, exc)
            continue
        model_id = timing.model_id
        compute.append(ComputeProfile(device, timing.ms_per_layer, usable_memory(device)))
    return MachineProfile(
        name=name or socket.gethostname(),
        model_id=model_id,
        weight_format=weight_format,
        compute=tuple(compute),
        free_ram_bytes=int(psutil.virtual_memory().available),
        disk_read_bytes_per_s=measure_disk_read(disk_folder or shards_cache_dir(), disk_bytes),
    )
