"""Measured layer times for the plan preview: this PC and every usable worker time the same probe
stage of the chosen export (:mod:`fleetgui.fleet.profiling.probe_stage`), all at once, off the GUI
thread (Qt-free: ``fleetgui serve`` measures with it too). A PC whose measurement fails keeps its
estimated layer time; the log and the preview say why.
"""

from __future__ import annotations

import asyncio
import functools
import logging
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path

from fleetgui.errors import FleetguiError
from fleetgui.fleet.profiling.measured import MeasuredDevices, MeasureProgress
from fleetgui.fleet.profiling.probe_stage import (
    ProbeShard,
    WorkerProfile,
    choose_probe,
    profile_here,
    profile_worker,
)
from fleetgui.fleet.ring.link import Dispatcher, LinkConfig, WorkerEndpoint, WorkerLink
from fleetgui.net.keys import KeyPair
from fleetgui.planner import DeviceProfile
from fleetgui.runtime.ov_stage import StageConfig

log = logging.getLogger(__name__)

_REASON_CHARS = 300


async def _profile_remote(
    endpoint: WorkerEndpoint, identity: KeyPair, probe: ProbeShard, config: LinkConfig
) -> WorkerProfile:
    link = WorkerLink(
        endpoint.name, endpoint.endpoint, endpoint.public_key, identity, Dispatcher(), config=config
    )
    try:
        await link.open()
        return await profile_worker(link, probe)
    finally:
        await link.close()


def _reason(exc: BaseException) -> str:
    text = str(exc) or type(exc).__name__
    return text if len(text) <= _REASON_CHARS else text[: _REASON_CHARS - 1] + "…"


async def measure_devices(
    base: Sequence[DeviceProfile],
    endpoints: Sequence[WorkerEndpoint],
    identity: KeyPair,
    model_dir: Path,
    *,
    local_stage: StageConfig,
    timings_file: Path | None = None,
    link_config: LinkConfig | None = None,
    progress: MeasureProgress | None = None,
) -> MeasuredDevices:
    """``base`` (this PC first, then workers, with estimated layer times) with the layer times
    measured on this PC and on the workers of ``endpoints`` for the export ``model_dir``."""
    report = progress or (lambda _: None)
    if not (Path(model_dir) / "manifest.json").is_file():
        why = "they are measured on an export's stage: export the model, then preview its plan"
        return MeasuredDevices(tuple(base), {p.name: why for p in base})
    try:
        probe = await asyncio.to_thread(choose_probe, Path(model_dir))
    except FleetguiError as exc:
        log.warning("layer times of %s not measured: %s", model_dir, exc)
        return MeasuredDevices(tuple(base), {p.name: _reason(exc) for p in base})
    by_name = {e.name: e for e in endpoints}
    here, workers = base[0], [p for p in base[1:] if p.name in by_name]
    names = ", ".join([here.name, *(p.name for p in workers)])
    report(f"measuring layer times ({probe}) on {names}")
    loop = asyncio.get_running_loop()
    local = functools.partial(
        profile_here, probe, local_stage, name=here.name, timings_file=timings_file
    )
    results = await asyncio.gather(
        loop.run_in_executor(None, local),
        *(
            _profile_remote(by_name[p.name], identity, probe, link_config or LinkConfig())
            for p in workers
        ),
        return_exceptions=True,
    )
    measured = {p.name: p for p in base}
    estimated: dict[str, str] = {}
    for profile, result in zip([here, *workers], results, strict=True):
        try:
            if isinstance(result, BaseException):
                raise result
            chosen = result.device_profile()
        except Exception as exc:  # any failure leaves the estimate, and says why
            log.warning("layer time of %s not measured, using the estimate: %s", profile.name, exc)
            estimated[profile.name] = _reason(exc)
            continue
        measured[profile.name] = replace(
            profile,
            ms_per_layer=chosen.ms_per_layer,
            ov_device=chosen.ov_device,
            memory_bytes=chosen.memory_bytes,
            # a worker's link timed its HELLO just now; this PC's own has none
            rtt_ms=chosen.rtt_ms if chosen.rtt_ms > 0 else profile.rtt_ms,
        )
        cached = " (cached)" if result.from_cache else ""
        report(f"{profile.name}: {chosen.ms_per_layer:.3f} ms per layer{cached}")
    for profile in base[1:]:
        if profile.name not in by_name:
            estimated[profile.name] = "not reachable for measuring"
    return MeasuredDevices(
        tuple(measured[p.name] for p in base), estimated, probe=f"{probe}, {probe.weight_format}"
    )
