"""What the dashboard's benchmark measures on the deployed pipeline and what it writes: the
``fleetgui bench`` configurations for one delay (the network as it is), its prompts, its
:class:`~fleetgui.bench.report.RunInfo` and its outputs (JSON, markdown, PNG) in a folder of
the app's data folder. No widgets and no Qt: :mod:`fleetgui.app.dashboard.fleet_bench` runs it."""

from __future__ import annotations

import datetime
import logging
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Literal

from fleetgui.bench.configurations import K_VALUES, Configuration, build_configurations
from fleetgui.bench.report import RunInfo
from fleetgui.bench.results import Results
from fleetgui.runtime.draft_source import NGRAM, DraftSource, draft_label

if TYPE_CHECKING:  # the fleet's and the sweep's modules load when a benchmark runs
    from fleetgui.bench.sweep import SweepPlan
    from fleetgui.fleet.session.session import FleetSession
    from fleetgui.runtime.tokenizer import Tokenizer

log = logging.getLogger(__name__)

COMMAND = "the app's dashboard: Benchmark this fleet"
DELAY = 0.0  # no added delay: the deployment's own network
DEPLOYED_DRAFT = "draft model"  # the deployed draft's label when its folder is not known
WHERE = "the fleet's own network"


@dataclass(frozen=True)
class BenchSettings:
    """What the user chose: new tokens a stream, repeats, the Ks to compare (None: K auto)."""

    tokens: int = 32
    repeats: int = 1
    ks: tuple[int | Literal["auto"], ...] = K_VALUES

    def __post_init__(self) -> None:
        if not 2 <= self.tokens <= 4096:
            raise ValueError(f"a decode rate needs 2 to 4096 new tokens, not {self.tokens}")
        if self.repeats < 1:
            raise ValueError(f"at least 1 repeat, not {self.repeats}")
        if not self.ks:
            raise ValueError("give at least one K (or auto)")


def bench_settings(tokens: int, repeats: int, ks_text: str) -> BenchSettings:
    """The settings as the dashboard's fields give them (``ks_text`` as ``--ks`` takes it,
    e.g. ``1,3,5,auto``); raises ``ValueError`` naming a bad value."""
    import argparse

    from fleetgui.bench.options import ks

    try:
        chosen = ks(ks_text)
    except argparse.ArgumentTypeError as exc:
        raise ValueError(f"Ks: {exc}") from None
    return BenchSettings(tokens, repeats, chosen)


@dataclass(frozen=True)
class BenchReport:
    """A finished (or stopped) run: its figures and where its files are."""

    results: Results
    info: RunInfo
    markdown: str  # the table and the headline figures
    folder: Path
    json_path: Path
    markdown_path: Path
    plot_path: Path | None  # None: no plot (its reason is in ``info.notes``)
    notes: list[str] = field(default_factory=list)

    @property
    def paths(self) -> list[Path]:
        return [p for p in (self.plot_path, self.markdown_path, self.json_path) if p is not None]


def draft_labels(deployed_is_model: bool, deployed_source: DraftSource | None) -> list[str]:
    """The drafters to compare, the deployed draft model first (the full stack uses it), then
    n-gram; n-gram alone when the deployment drafts with n-gram or has no draft."""
    if not deployed_is_model:
        return [NGRAM]
    label = DEPLOYED_DRAFT
    if deployed_source is not None and deployed_source != NGRAM:
        label = draft_label(deployed_source)
    if label == NGRAM:  # a draft folder called ngram: keep the two apart
        label = f"{NGRAM} (folder)"
    return [label, NGRAM]


def configurations(drafts: list[str], settings: BenchSettings) -> list[Configuration]:
    """PP, PP+MB, PP+SD at each K with each drafter, the full stack: no monolithic baseline,
    no hub (the deployment's ring is what the user runs), no TTFT sweep (``fleetgui bench``
    has it)."""
    return build_configurations(
        drafts, baseline=False, hub_delay=None, ks=settings.ks, ttft_lengths=()
    )


def sweep_plan(
    tokenizer: Tokenizer, chosen: list[Configuration], settings: BenchSettings
) -> SweepPlan:
    """The plan at the one delay, prompted as the CLI prompts (in worker threads: it encodes)."""
    from fleetgui.bench.sweep import plan_sweep

    return plan_sweep(
        tokenizer,
        chosen,
        delays=[DELAY],
        repeats=settings.repeats,
        tokens=settings.tokens,
        where=WHERE,
    )


def fleet_text(session: FleetSession | None) -> tuple[str, str]:
    """Who runs which stages, and the ring as the links go."""
    assignment = None if session is None else session.deployment.assignment
    if assignment is None:
        return "this PC alone, every stage here", "a single PC: no network"
    here = ", ".join(map(str, assignment.local)) or "none"
    members = [f"{m.name} {', '.join(map(str, m.indices))}" for m in assignment.members]
    who = f"stages on this PC: {here}; on workers: {'; '.join(members) or 'none'}"
    ring = " -> ".join(["this PC", *(m.name for m in assignment.members), "this PC"])
    return who, f"ring: {ring}, over the fleet's own links"


def run_info(
    model: str, session: FleetSession | None, settings: BenchSettings, drafts: list[str]
) -> RunInfo:
    """What the outputs record about the run (reads the machine: in a worker thread)."""
    from fleetgui.bench.links import DelayMethod, LinkChoice
    from fleetgui.bench.machine import machine_record, versions_record

    who, ring = fleet_text(session)
    links = LinkChoice(DelayMethod.NONE, "the deployed fleet")
    return RunInfo(
        command=COMMAND,
        started=datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
        machine=machine_record(),
        versions=versions_record(),
        model={"description": model},
        fleet={"local": session is None, "description": who},
        network={
            "method": links.method.value,
            "emulated": False,
            "label": links.label,
            "why": links.reason,
            "topology": ring,
        },
        settings={
            "tokens": settings.tokens,
            "repeats": settings.repeats,
            "delays_ms": [DELAY],
            "ks": list(settings.ks),
            "drafts": drafts,
        },
    )


def model_text(export_dir: Path, fallback: str) -> str:
    """The export as the table's header names it."""
    from fleetgui.export.manifest import read_manifest

    try:
        m = read_manifest(export_dir)
    except Exception as exc:  # the header only: any unreadable manifest falls back
        log.info("bench: no manifest in %s (%s)", export_dir, exc)
        return fallback or export_dir.name
    return f"{m.model_name} ({export_dir.name}), {len(m.stages)} stages, {m.weight_format}"


def run_folder(root: Path) -> Path:
    """A new folder for a run's files under ``root``, named by its start time."""
    stamp = datetime.datetime.now().strftime("%Y%m%d-%H%M%S")
    folder, n = root / f"bench-{stamp}", 1
    while folder.exists():
        n += 1
        folder = root / f"bench-{stamp}-{n}"
    folder.mkdir(parents=True)
    return folder


def write_outputs(root: Path, info: RunInfo, results: Results) -> BenchReport:
    """The JSON, the markdown and (with matplotlib) the PNG, in a new folder under ``root``
    (blocking: in a worker thread)."""
    from fleetgui.bench.plot import plot_support, write_plot
    from fleetgui.bench.report import markdown, write_json, write_markdown

    folder = run_folder(root)
    plot: Path | None = folder / "bench.png"
    notes = []
    if (missing := plot_support()) is not None:
        notes.append(missing.replace("--plot", "the plot"))
        plot = None
    if plot is not None:
        title = (
            f"{info.model['description']} | {info.machine['cpu']}, {info.machine['cores']} "
            f"cores | {info.network['label']}"
        )
        write_plot(plot, results, title)
    json_path, markdown_path = folder / "bench.json", folder / "bench.md"
    write_json(json_path, info, results)
    write_markdown(markdown_path, info, results, plot)
    log.info("benchmark written to %s", folder)
    return BenchReport(
        results,
        info,
        markdown(info, results),
        folder,
        json_path,
        markdown_path,
        plot,
        notes,
    )
