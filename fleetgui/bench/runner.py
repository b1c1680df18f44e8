"""``fleetgui bench`` end to end: the target and its drafters, the fleet on its links, the
sweep, and what the outputs record about the run."""

from __future__ import annotations

import asyncio
import contextlib
import datetime
import logging
import tempfile
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

from fleetgui import paths
from fleetgui.assembler import aopen
from fleetgui.bench.baseline import Baseline, fits
from fleetgui.bench.configurations import TTFT_LENGTHS, Configuration, build_configurations
from fleetgui.bench.fleet import LocalBenchFleet, remote_endpoints
from fleetgui.bench.links import LinkChoice
from fleetgui.bench.machine import machine_record, versions_record
from fleetgui.bench.netns import Shape
from fleetgui.bench.options import BenchOptions
from fleetgui.bench.progress import Progress, Write
from fleetgui.bench.report import RunInfo
from fleetgui.bench.results import Results
from fleetgui.bench.sweep import Sweep, plan_sweep
from fleetgui.errors import FleetguiError
from fleetgui.export.manifest import Manifest, read_manifest
from fleetgui.fleet.ring.link import WorkerEndpoint
from fleetgui.fleet.session.config import CoordinatorConfig
from fleetgui.net.keys import KeyPair
from fleetgui.runtime.draft_source import DraftSource, draft_label
from fleetgui.runtime.loader import LocalPipelineConfig, context_limit_of, load_draft
from fleetgui.runtime.ov_stage import StageConfig
from fleetgui.runtime.pipeline import Pipeline
from fleetgui.runtime.speculative import Drafter

log = logging.getLogger(__name__)

WORKER_NAMES = "worker-{}"
SetDelay = Callable[[float], None]


@dataclass
class Target:
    """What is benchmarked: the stage export, its drafters and the monolithic baseline."""

    export_dir: Path
    drafts: dict[str, DraftSource]  # label -> source, the given one first
    baseline_dir: Path | None
    notes: list[str] = field(default_factory=list)

    @property
    def manifest(self) -> Manifest:
        return read_manifest(self.export_dir)

    def describe(self) -> str:
        m = self.manifest
        layers = ", ".join(f"{s.start_layer}:{s.end_layer}" for s in m.stages)
        return f"{m.model_name}, {len(m.stages)} stages ({m.weight_format}, layers {layers})"


def prepare_target(options: BenchOptions) -> Target:
    """The export to benchmark (the demo model's, fetched and exported once, without one) and
    its baseline; long the first time for the demo model."""
    notes: list[str] = []
    drafts = {_label(d): d for d in options.drafts}
    baseline = None if options.skip_baseline else options.baseline
    missing = not options.skip_baseline and baseline is None  # wanted, none given
    if options.export_dir is not None:
        export_dir = options.export_dir
        if missing:
            notes.append("no monolithic baseline: give one with --baseline MONOLITHIC_EXPORT")
    else:
        from fleetgui.demo.models import REAL_WEIGHTS, export_real

        export_dir = export_real()
        if missing:
            baseline = _demo_baseline(REAL_WEIGHTS, notes)
    if baseline is not None and (too_big := fits(baseline)) is not None:
        notes.append(f"no monolithic baseline: {too_big}")
        baseline = None
    if options.no_baseline:
        notes.append("no monolithic baseline (--no-baseline)")
    return Target(export_dir, drafts, baseline, notes)


def _label(source: DraftSource) -> str:
    return "ngram" if not isinstance(source, Path) else draft_label(source)


def _demo_baseline(weights: str, notes: list[str]) -> Path | None:
    try:
        from fleetgui.bench.baseline import demo_monolithic
        from fleetgui.demo.smollm2 import fetch_smollm2

        return demo_monolithic(fetch_smollm2(), weights)
    except ImportError as exc:
        notes.append(f"no monolithic baseline: exporting it needs fleetgui[export] ({exc})")
        return None


def plan_configurations(
    options: BenchOptions, target: Target
) -> tuple[list[Configuration], list[str]]:
    """The run's configurations, and notes on what was left out."""
    notes = []
    manifest = target.manifest
    limit = context_limit_of(manifest, None)
    lengths = [n for n in TTFT_LENGTHS if n + 2 <= limit]
    if len(lengths) < len(TTFT_LENGTHS):
        notes.append(f"TTFT prompts longer than the model's context ({limit}) left out")
    on_workers = min(len(manifest.stages), options.n_workers)
    hub_delay = max(options.delays) if on_workers >= 2 else None
    configurations = build_configurations(
        list(target.drafts),
        baseline=target.baseline_dir is not None,
        hub_delay=hub_delay,
        ks=options.ks,
        ttft_lengths=lengths,
        kinds=options.modes,
    )
    return configurations, notes


def coordinator_config(manifest: Manifest, n_workers: int, local: bool) -> CoordinatorConfig:
    """Every stage on a worker when there are enough (the coordinator drafts, as in the demo);
    the first ones here otherwise. One OpenVINO thread a stage: one core stands in for a PC."""
    stage = StageConfig(threads=1)
    return CoordinatorConfig(
        local_stages=max(0, len(manifest.stages) - n_workers),
        local=LocalPipelineConfig(stage=stage, draft_stage=stage),
        worker_threads=1 if local else 0,
    )


@dataclass
class BenchRun:
    """One ``fleetgui bench`` run (see module doc)."""

    options: BenchOptions
    links: LinkChoice
    target: Target
    configurations: list[Configuration]
    command: str
    progress_write: Write | None = None
    results: Results = field(init=False)
    info: RunInfo = field(init=False)

    def __post_init__(self) -> None:
        self.results = Results(self.configurations, list(self.options.delays), self.options.repeats)
        self.info = RunInfo(
            command=self.command,
            started=datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
            machine=machine_record(),
            versions=versions_record(),
            model={
                "export": str(self.target.export_dir),
                "name": self.target.manifest.model_name,
                "stages": len(self.target.manifest.stages),
                "weights": self.target.manifest.weight_format,
                "description": self.target.describe(),
                "baseline": None
                if self.target.baseline_dir is None
                else str(self.target.baseline_dir),
            },
            fleet={},
            network={
                "method": self.links.method.value,
                "emulated": self.links.emulated,
                "label": self.links.label,
                "why": self.links.reason,
                "rate_mbit": self.options.rate_mbit or None,
                "loss_pct": self.options.loss_pct or None,
                "topology": "",
            },
            settings={
                "tokens": self.options.tokens,
                "repeats": self.options.repeats,
                "delays_ms": list(self.options.delays),
                "ks": list(self.options.ks),
                "drafts": list(self.target.drafts),
            },
            notes=list(self.target.notes),
        )

    def run(self) -> None:
        """Start the fleet, measure, stop everything (on Ctrl+C too: the caller gets
        ``KeyboardInterrupt`` after the teardown, with :attr:`results` holding what ran)."""
        with self._fleet() as (endpoints, identity, set_delay):
            asyncio.run(self._measure(endpoints, identity, set_delay))

    @contextlib.contextmanager
    def _fleet(self) -> Iterator[tuple[list[WorkerEndpoint], KeyPair, SetDelay]]:
        options = self.options
        names = [WORKER_NAMES.format(i + 1) for i in range(options.n_workers)]
        if not options.local:
            from fleetgui.net.keys import coordinator_identity

            endpoints = asyncio.run(remote_endpoints(list(options.remote_workers)))
            self.info.fleet = {
                "local": False,
                "workers": [e.name for e in endpoints],
                "description": f"{len(endpoints)} workers of your own: "
                + ", ".join(e.name for e in endpoints),
            }
            self.info.network["topology"] = "your own network"
            yield endpoints, coordinator_identity(), _no_delay
            return
        root = paths.data_dir() / "bench-fleets"
        root.mkdir(parents=True, exist_ok=True)
        shape = Shape(0.0, options.rate_mbit, options.loss_pct)
        with (
            tempfile.TemporaryDirectory(prefix="run-", dir=root) as home,
            LocalBenchFleet(Path(home), names, self.links, shape, pin=options.pin) as fleet,
        ):
            self.info.fleet = {
                "local": True,
                "workers": names,
                "cores": fleet.cores.describe(),
                "description": f"{len(names)} local worker processes, 1 OpenVINO thread each "
                f"({fleet.cores.describe()})",
            }
            self.info.network["topology"] = fleet.describe()
            if fleet.star is not None:  # namespace names carry it (fleetgui.bench.netns)
                self.info.network["run_id"] = fleet.star.run_id
            yield fleet.endpoints, fleet.identity, fleet.set_delay

    async def _measure(
        self, endpoints: list[WorkerEndpoint], identity: KeyPair, set_delay: SetDelay
    ) -> None:
        target = self.target
        manifest = target.manifest
        config = coordinator_config(manifest, len(endpoints), self.options.local)
        on_coordinator = config.local_stages
        self.info.fleet["layout"] = (
            "the coordinator drafts; every stage on a worker"
            if on_coordinator == 0
            else f"the coordinator drafts and runs the first {on_coordinator} stages"
        )
        sources = list(target.drafts.items())
        llm = await aopen(
            target.export_dir,
            workers=endpoints,
            draft=sources[0][1],
            max_streams=max(c.streams for c in self.configurations),
            identity=identity,
            coordinator=config,
        )
        pipeline = llm.runtime
        drafters: dict[str, Drafter] = {}
        try:
            if not isinstance(pipeline, Pipeline) or pipeline.draft is None:
                raise FleetguiError("the benchmark's pipeline has no drafter to swap")
            drafters[sources[0][0]] = pipeline.draft
            import openvino as ov

            for label, source in sources[1:]:
                drafters[label] = await asyncio.to_thread(
                    load_draft, source, manifest, pipeline.tokenizer, config.local, ov.Core()
                )
            plan = await asyncio.to_thread(
                plan_sweep,
                pipeline.tokenizer,
                self.configurations,
                delays=self.options.delays,
                repeats=self.options.repeats,
                tokens=self.options.tokens,
            )
            baseline = Baseline(target.baseline_dir) if target.baseline_dir else None
            progress = Progress(plan.steps())
            if self.progress_write is not None:
                progress.write = self.progress_write
            sweep = Sweep(
                plan,
                session=llm.sessions[0],
                pipeline=pipeline,
                drafters=drafters,
                set_delay=set_delay,
                baseline=baseline,
                progress=progress,
            )
            await sweep.warm_up()
            await sweep.run(self.results)
        finally:
            for drafter in drafters.values():
                if drafter is not pipeline.draft:  # the pipeline closes its own
                    await drafter.close()
            await llm.aclose()


def _no_delay(delay_ms: float) -> None:
    if delay_ms:
        raise ValueError("your own workers' links get no added delay")
