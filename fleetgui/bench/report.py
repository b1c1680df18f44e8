"""A run's outputs: the JSON record (one object per configuration and delay) and the markdown.

Both carry the command, the machine, the OpenVINO version, how the links were delayed (an
emulation says so) and the topology, so a table pasted elsewhere still tells where it came from.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from fleetgui.bench.configurations import Measurement, Mode, draft_name
from fleetgui.bench.results import BASELINE_DELAY, Cell, Results
from fleetgui.fsutil import atomic_write_text

SCHEMA = "fleetgui-bench/1"
PAPER = {  # the paper's figures the summary sets ours beside
    "full_stack_over_pp": "2.83x on LAN, 4.04x at 100 ms a hop (2 streams)",
    "best_k": "K=5-7 on LAN, K=10 at 50 ms a hop and more",
}


@dataclass
class RunInfo:
    """What the run was: everything but the figures."""

    command: str
    started: str  # ISO 8601, UTC
    machine: dict[str, Any]
    versions: dict[str, str | None]
    model: dict[str, Any]
    fleet: dict[str, Any]
    network: dict[str, Any]
    settings: dict[str, Any]
    notes: list[str] = field(default_factory=list)  # what was left out, and why
    duration_s: float = 0.0
    interrupted: bool = False


def _round(value: float | None, digits: int = 3) -> float | None:
    return None if value is None else round(value, digits)


def cell_record(results: Results, cell: Cell) -> dict[str, Any]:
    """The JSON object of one configuration at one delay."""
    c = cell.configuration
    done = cell.done()
    breakdown = cell.breakdown()
    return {
        "key": c.key,
        "label": c.label,
        "mode": c.mode.value,
        "streams": c.streams,
        "k": c.k_text if c.speculative else None,
        "draft": c.draft,
        "topology": c.topology,
        "prompt_tokens": c.prompt_tokens,  # TTFT's asked length
        "prompt_tokens_run": _round(cell.median("prompt_tokens"), 1),  # as the tokenizer made it
        "delay_ms": None if cell.delay_ms == BASELINE_DELAY else cell.delay_ms,
        "repeats_run": len(done),
        "tokens_per_s": _round(cell.tokens_per_s),
        "tokens_per_s_runs": [None if r is None else _round(r.tokens_per_s) for r in cell.runs],
        "ttft_ms": _round(cell.median("ttft_ms")),
        "new_tokens": sum(r.new_tokens for r in done),
        "acceptance": _round(cell.median("acceptance"), 4),
        "mean_k": _round(cell.median("mean_k"), 2),
        "over_pp": _round(results.over_pp(cell)),
        "breakdown_ms_per_token": None
        if breakdown is None
        else {k: round(v, 3) for k, v in asdict(breakdown).items()},
    }


def ordered_cells(results: Results) -> list[Cell]:
    """Cells in the configurations' order, each one's delays ascending."""
    order = {c.key: i for i, c in enumerate(results.configurations)}
    return sorted(
        results.cells.values(), key=lambda c: (order.get(c.configuration.key, 0), c.delay_ms)
    )


def json_record(info: RunInfo, results: Results) -> dict[str, Any]:
    return {
        "schema": SCHEMA,
        **asdict(info),
        "configurations": [cell_record(results, cell) for cell in ordered_cells(results)],
        "measured_hop_ms": results.measured_hop_ms(),
        "summary": results.summary(),
        "paper": PAPER,
    }


def write_json(path: Path, info: RunInfo, results: Results) -> None:
    atomic_write_text(path, json.dumps(json_record(info, results), indent=2) + "\n")


def _cell_text(results: Results, cell: Cell | None) -> str:
    if cell is None or not cell.done():
        return ""
    c = cell.configuration
    if c.mode == Measurement.TTFT:
        return f"{cell.median('ttft_ms'):.0f} ms"
    text = f"{cell.tokens_per_s:.1f}"
    ratio = results.over_pp(cell)
    if ratio is not None and c.key != Mode.PP.value:
        text += f" ({ratio:.2f}x)"
    acceptance = cell.median("acceptance")
    if acceptance is not None:
        text += f", {acceptance:.0%}"
        if c.k == "auto" and cell.median("mean_k") is not None:
            text += f", K {cell.median('mean_k'):.1f}"
    return text


def _headline(results: Results) -> list[str]:
    summary = results.summary()
    lines = []
    stack = next((c for c in results.configurations if c.key == summary["full_stack"]), None)
    if stack is not None:
        ratios = ", ".join(
            f"{d} ms {r:.2f}x" for d, r in summary["full_stack_over_pp"].items() if r is not None
        )
        lines.append(
            f"- Full stack ({stack.label}) over naive PP: {ratios or 'not measured'} "
            f"(paper: {PAPER['full_stack_over_pp']})."
        )
    for delay, choices in summary["k_auto_vs_best_fixed"].items():
        for choice in choices:
            auto = choice["auto_over_best"]
            lines.append(
                f"- {delay} ms, {draft_name(choice['draft'])}: best fixed K={choice['best_k']} "
                f"({choice['best_k_tokens_per_s']:.1f} tok/s); K auto "
                f"{choice['auto_tokens_per_s']:.1f} tok/s"
                + (f", {auto:.2f}x of it" if auto is not None else "")
                + (f", mean K {choice['auto_mean_k']:.1f}" if choice["auto_mean_k"] else "")
                + "."
            )
    if summary["k_auto_vs_best_fixed"]:
        lines.append(f"- The paper's best K: {PAPER['best_k']}.")
    hub = summary["ring_over_hub"]
    if hub is not None and hub["ratio"] is not None:
        lines.append(
            f"- PP over the ring vs over a hub at {hub['delay_ms']:g} ms: {hub['ratio']:.2f}x."
        )
    return lines


def _breakdown_rows(results: Results) -> list[str]:
    rows = []
    for cell in ordered_cells(results):
        parts = cell.breakdown()
        c = cell.configuration
        if (
            parts is None
            or c.mode not in (Mode.PP, Mode.PP_SD)
            or (c.speculative and c.k != "auto")
        ):
            continue
        rows.append(
            f"| {c.label} | {cell.delay_ms:g} ms | {parts.stage_compute_ms:.1f} | "
            f"{parts.transfer_ms:.1f} | {parts.draft_ms:.1f} | {parts.coordinator_ms:.1f} | "
            f"{parts.total_ms:.1f} |"
        )
    return rows


def markdown(info: RunInfo, results: Results, plot_link: str | None = None) -> str:
    """The run as a markdown section: what ran, the table, the headline figures."""
    delays = results.delays
    network = info.network
    lines = [
        f"`{info.command}`",
        "",
        f"{info.started[:10]}; {info.machine['cpu']}, {info.machine['cores']} cores; "
        f"OpenVINO {info.versions['openvino']}; {info.model['description']}; "
        f"{info.fleet['description']}.",
        "",
        f"Links: **{network['label']}**. {network['topology']}.",
        "",
        f"{info.settings['tokens']} new tokens a stream, greedy, median of "
        f"{info.settings['repeats']} interleaved repeats"
        + (" (**interrupted**: fewer runs)" if info.interrupted else "")
        + ". A cell: decode tokens/s of all streams together, (its paired ratio over naive PP at "
        "that delay), and for PP+SD the acceptance (and K auto's mean K); TTFT rows: time to "
        "the first token.",
        "",
        "| configuration | " + " | ".join(f"{d:g} ms a hop" for d in delays) + " |",
        "| --- |" + " --- |" * len(delays),
    ]
    for configuration in results.configurations:
        if not configuration.per_delay:
            cell = results.cell(configuration, 0.0)
            row = [f"{_cell_text(results, cell)} (no network)"] + [""] * (len(delays) - 1)
        else:
            row = [_cell_text(results, results.cell(configuration, d)) for d in delays]
        lines.append(f"| {configuration.label} | " + " | ".join(row) + " |")
    lines += ["", *_headline(results)]
    breakdown = _breakdown_rows(results)
    if breakdown:
        lines += [
            "",
            "Per token (ms): stage compute, transfer (the network, the messages and the workers' "
            "Python), the drafts, the coordinator's Python.",
            "",
            "| configuration | delay | compute | transfer | drafts | coordinator | total |",
            "| --- | --- | --- | --- | --- | --- | --- |",
            *breakdown,
        ]
    hops = results.measured_hop_ms()
    if hops:
        lines += [
            "",
            "Measured hop (half a heartbeat's round trip, idle): "
            + ", ".join(f"{d} ms: {v:.1f} ms" for d, v in hops.items())
            + ".",
        ]
    if info.notes:
        lines += ["", *(f"Note: {note}" for note in info.notes)]
    if plot_link is not None:
        lines += ["", f"![tokens/s against the delay, and the per-token breakdown]({plot_link})"]
    return "\n".join(lines) + "\n"


def write_markdown(path: Path, info: RunInfo, results: Results, plot: Path | None) -> None:
    """The markdown into ``path``, linking ``plot`` relative to it."""
    link = None
    if plot is not None:
        try:
            link = plot.resolve().relative_to(path.resolve().parent).as_posix()
        except ValueError:
            link = plot.resolve().as_posix()
    atomic_write_text(path, markdown(info, results, link))
