"""Measured layer times (``fleetgui.fleet.profiling.probe_stage``): the probe stage an export is
timed with, and a real worker process on loopback timing it (PROFILE): once, then from its cache
without being sent anything; refusals with the fix; heartbeats answered while it measures."""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
from fleet_support import WorkerProcess
from runtime_support import EXACT_STAGE

from fleetgui.export.manifest import FileEntry, Manifest, ManifestStage
from fleetgui.fleet.profiling.probe_stage import (
    ProfileError,
    choose_probe,
    profile_here,
    profile_worker,
)
from fleetgui.fleet.ring.link import Dispatcher, LinkConfig, WorkerLink
from fleetgui.fleet.ring.shard_push import push_files
from fleetgui.net.keys import KeyPair
from fleetgui.net.protocol import ErrorCode, Message, Op, RemoteError

FAST_LINKS = LinkConfig(heartbeat_interval_s=0.1, lost_after_s=1.0)


# -- which stage is timed (pure, on manifests) ------------------------------------------------


def _entry(
    index: int, start: int, end: int, parts: tuple[tuple[int, int], ...] = ()
) -> ManifestStage:
    names = [f"stage_{s}-{e}" for s, e in parts] or [f"stage_{start}-{end}"]
    files = tuple(
        FileEntry(f"{name}{suffix}", f"{index:02d}{i:02d}{j}".ljust(64, "0"), 100)
        for i, name in enumerate(names)
        for j, suffix in enumerate((".xml", ".bin"))
    )
    return ManifestStage(
        index,
        start,
        end,
        files,
        (),
        (),
        (),
        parts=tuple(f"{n}.xml" for n in names) if parts else (),
    )


def _write(
    folder: Path, stages: list[ManifestStage], n_layers: int, layout: str = "stages"
) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    manifest = Manifest("tiny", "0" * 64, "llama", n_layers, 64, 100, "int4", tuple(stages))
    replace(manifest, layout=layout).write(folder)
    return folder


@pytest.mark.parametrize(
    ("case", "stages", "n_layers", "chosen"),
    [
        ("three stages: the middle one", [(0, 2), (2, 3), (3, 4)], 4, (2, 3)),
        ("the middle one with the fewest layers", [(0, 1), (1, 3), (3, 4), (4, 6)], 6, (3, 4)),
        ("two stages: the first (an embedding costs nothing)", [(0, 2), (2, 4)], 4, (0, 2)),
        ("one stage: itself, head and all", [(0, 4)], 4, (0, 4)),
        ("a stage in chunks: its smallest part", [(0, 3), (3, 8), (8, 10)], 10, (7, 8)),
    ],
)
def test_the_probe_is_the_smallest_stage_without_head_or_embedding(
    tmp_path: Path,
    case: str,
    stages: list[tuple[int, int]],
    n_layers: int,
    chosen: tuple[int, int],
) -> None:
    chunks = {(3, 8): ((3, 5), (5, 7), (7, 8))}
    entries = [_entry(i, s, e, chunks.get((s, e), ())) for i, (s, e) in enumerate(stages)]
    probe = choose_probe(_write(tmp_path, entries, n_layers))
    assert (probe.shard.start_layer, probe.shard.end_layer) == chosen, case
    assert probe.model_file == f"stage_{chosen[0]}-{chosen[1]}.xml"
    assert [f.path for f in probe.files] == [probe.model_file, probe.model_file[:-4] + ".bin"]
    spec = probe.spec()
    assert spec.n_layers == chosen[1] - chosen[0] and spec.first == (chosen[0] == 0)
    assert spec.weight_format == "int4" and spec.hidden_size == 64


def test_a_monolithic_export_has_no_probe(tmp_path: Path) -> None:
    folder = _write(tmp_path, [_entry(0, 0, 4)], 4, layout="monolithic")
    with pytest.raises(ProfileError, match="export it in stages"):
        choose_probe(folder)


# -- a real worker ----------------------------------------------------------------------------


@pytest.fixture(scope="module")
def exports(tiny_export: Callable[..., Path]) -> dict[str, Path]:
    return {"3s": tiny_export(3), "4s": tiny_export(4)}


@pytest.fixture(scope="module")
def worker(start_workers: Callable[..., list[WorkerProcess]]) -> WorkerProcess:
    (started,) = start_workers("p1")
    return started


def with_link(identity: KeyPair, worker: WorkerProcess, job: Callable[[WorkerLink], Any]) -> Any:
    """Run ``job(link)`` on an open link to ``worker``."""

    async def main() -> Any:
        endpoint = worker.endpoint
        link = WorkerLink(
            endpoint.name,
            endpoint.endpoint,
            endpoint.public_key,
            identity,
            Dispatcher(),
            config=FAST_LINKS,
        )
        await link.open()
        try:
            return await job(link)
        finally:
            await link.close()

    return asyncio.run(main())


@pytest.mark.slow
def test_a_worker_measures_once_then_answers_from_its_cache_without_files(
    exports: dict[str, Path], identity: KeyPair, worker: WorkerProcess, tmp_path: Path
) -> None:
    probe = choose_probe(exports["3s"])
    assert (probe.shard.start_layer, probe.shard.end_layer) == (2, 3)  # the middle of 4 layers
    first, second = with_link(
        identity,
        worker,
        lambda link: _twice(profile_worker(link, probe), lambda: profile_worker(link, probe)),
    )
    assert first.bytes_sent == sum(f.size for f in probe.files) and not first.from_cache
    assert [c.ov_device for c in first.machine.compute] == ["CPU"]  # no GPU here
    cpu = first.machine.compute[0]
    assert 0 < cpu.ms_per_layer < 1000 and cpu.memory_bytes > 0
    assert first.stage_device == "CPU" and first.machine.free_ram_bytes > 0
    profile = first.device_profile()
    assert profile.name == "p1" and profile.ms_per_layer == cpu.ms_per_layer
    assert first.machine.model_id == probe.shard.model_id and first.machine.weight_format == "fp32"
    # the second call: the worker's cache answers, nothing is sent
    assert second.from_cache and second.bytes_sent == 0
    assert second.machine.compute[0].ms_per_layer == cpu.ms_per_layer  # memory is live
    cache = json.loads((worker.home / "data" / "planner" / "probe_timings.json").read_text())
    assert [v["ms_per_layer"] for v in cache["entries"].values()] == [cpu.ms_per_layer]
    # this PC times the same probe with the same function (its own cache)
    here = profile_here(probe, EXACT_STAGE, name="here", timings_file=tmp_path / "t.json")
    assert here.device_profile().ms_per_layer > 0 and not here.from_cache
    again = profile_here(probe, EXACT_STAGE, name="here", timings_file=tmp_path / "t.json")
    assert again.from_cache
    assert again.machine.compute[0].ms_per_layer == here.machine.compute[0].ms_per_layer


async def _twice(first: Any, second: Callable[[], Any]) -> tuple[Any, Any]:
    return await first, await second()


@pytest.mark.slow
@pytest.mark.parametrize(
    ("case", "change", "code", "text"),
    [
        ("files it lacks", {}, ErrorCode.MISSING_FILES, "missing or damaged: send them first"),
        ("no such device", {"devices": ["GPU.7"]}, ErrorCode.STAGE_FAILED, "GPU.7"),
        ("no layers", {"n_layers": 0}, ErrorCode.BAD_FIELD, "'n_layers' must be"),
        ("a model file it was not sent", {"model_file": "x.xml"}, ErrorCode.BAD_FIELD, "one of"),
        ("too many steps", {"steps": 10**6}, ErrorCode.BAD_FIELD, "'steps' must be"),
    ],
)
def test_a_profile_the_worker_cannot_do_is_refused_with_why(
    exports: dict[str, Path],
    identity: KeyPair,
    worker: WorkerProcess,
    case: str,
    change: dict[str, Any],
    code: ErrorCode,
    text: str,
) -> None:
    probe = choose_probe(exports["4s"])  # files no other test sends this worker
    meta = {**probe.spec().to_meta(), **change}

    async def ask(link: WorkerLink) -> None:
        if code is not ErrorCode.MISSING_FILES:
            await push_files(link, probe.root, probe.files)
        await link.call(Message(Op.PROFILE, meta=meta))

    if code is ErrorCode.MISSING_FILES:
        assert not any((worker.home / "cache" / "blobs" / f.sha256).exists() for f in probe.files)
    with pytest.raises(RemoteError) as raised:
        with_link(identity, worker, ask)
    assert raised.value.code == code, case
    assert text in str(raised.value), case


@pytest.mark.slow
def test_the_worker_answers_heartbeats_while_it_measures(
    exports: dict[str, Path], identity: KeyPair, worker: WorkerProcess
) -> None:
    probe = choose_probe(exports["3s"])
    # a new cache entry, so it is measured now; within the tiny model's 4096 positions
    long_run = {"warmup": 100, "steps": 1000}

    async def measure(link: WorkerLink) -> Any:
        # one measurement took 0.47 s on an idle EPYC, too short to interleave requests with:
        # three in a row, each a new cache entry (its own past_tokens), so each is measured
        for past in (2800, 2900, 3000):
            profile = await profile_worker(link, probe, past_tokens=past, **long_run)
        return profile

    async def job(link: WorkerLink) -> tuple[float, list[float], Any]:
        started = time.perf_counter()
        task = asyncio.ensure_future(measure(link))
        answered: list[float] = []
        while not task.done():
            asked = time.perf_counter()
            await link.call(Message(Op.HEARTBEAT if len(answered) % 2 else Op.HELLO))
            answered.append(time.perf_counter() - asked)
            await asyncio.sleep(0.05)
        profile = await task
        assert link.lost is None  # its own heartbeats never went unanswered either
        return time.perf_counter() - started, answered, profile

    took, answered, profile = with_link(identity, worker, job)
    assert not profile.from_cache and profile.device_profile().ms_per_layer > 0
    # requests answered while it measured, none of them held up for long: a worker whose loop
    # waited for the measurement would answer one request about as late as it took
    assert len(answered) >= 3 and max(answered) < min(0.5, took / 3), (took, answered)


@pytest.mark.slow
def test_a_pc_that_cannot_be_measured_keeps_its_estimate_and_the_preview_says_why(
    exports: dict[str, Path],
    identity: KeyPair,
    worker: WorkerProcess,
    tiny_models: Callable[..., Path],
    tmp_path: Path,
    caplog: pytest.LogCaptureFixture,
) -> None:
    pytest.importorskip("PySide6")
    from fleetgui.fleet.profiling.layer_times import measure_devices
    from fleetgui.fleet.ring.link import WorkerEndpoint
    from fleetgui.planner import DeviceProfile
    from fleetgui.worker.service import free_port_pair

    base = [DeviceProfile(n, 8 << 30, 1.0, 1e9) for n in ("here", "p1", "ghost")]
    nobody = f"tcp://127.0.0.1:{free_port_pair()}"  # nothing listens there
    ghost = WorkerEndpoint("ghost", nobody, KeyPair.generate().public)
    steps: list[str] = []

    def measure(model_dir: Path) -> Any:
        return asyncio.run(
            measure_devices(
                base,
                [worker.endpoint, ghost],
                identity,
                model_dir,
                local_stage=EXACT_STAGE,
                timings_file=tmp_path / "timings.json",
                link_config=LinkConfig(connect_timeout_s=1.0),
                progress=steps.append,
            )
        )

    measured = measure(exports["3s"])
    names = [p.name for p in measured.profiles]
    assert names == ["here", "p1", "ghost"]
    here, p1, lost = measured.profiles
    assert here.ms_per_layer != 1.0 and p1.ms_per_layer != 1.0  # measured
    assert lost == base[2]  # the estimate, unchanged
    assert list(measured.estimated) == ["ghost"]
    assert "ghost" in caplog.text and "using the estimate" in caplog.text  # the log says why
    text = str(measured)
    assert text.startswith("Layer times measured on here, p1 with stage_2-3.xml")
    assert "; estimated for ghost: " in text
    assert steps[0].startswith("measuring layer times") and len(steps) == 3  # + one per PC
    assert steps[1].startswith(f"here: {here.ms_per_layer:.3f} ms per layer")
    assert steps[2].startswith(f"p1: {p1.ms_per_layer:.3f} ms per layer")
    # a HuggingFace folder is planned with estimates, and the preview says how to measure
    hf = measure(tiny_models("llama"))
    assert hf.profiles == tuple(base) and set(hf.estimated) == {"here", "p1", "ghost"}
    assert str(hf).startswith("Layer times are estimates: they are measured on an export's stage")
