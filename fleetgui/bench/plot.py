"""The run as a PNG: tokens/s against the delay per mode, and the per-token breakdown.

Drawn with matplotlib (the ``bench`` extra) on its non-interactive Agg backend, so it needs no
display. The title names the model, the CPU and how the links were delayed.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

from fleetgui.bench.configurations import Configuration, Measurement, Mode, draft_name
from fleetgui.bench.results import Results
from fleetgui.errors import FleetguiError

log = logging.getLogger(__name__)

BREAKDOWN_PARTS = (
    ("stage_compute_ms", "stage compute"),
    ("transfer_ms", "transfer"),
    ("draft_ms", "drafts"),
    ("coordinator_ms", "coordinator Python"),
)


def plot_support() -> str | None:
    """Why a plot cannot be drawn here, or None."""
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        return "--plot needs matplotlib: pip install 'fleetgui[bench]'"
    return None


def _curves(results: Results) -> list[Configuration]:
    """What the rate panel draws: every throughput mode but the fixed Ks (K auto stands for
    them; the table has each K) and the hub (one delay only)."""
    return [
        c
        for c in results.configurations
        if c.per_delay
        and c.mode != Measurement.TTFT
        and c.at_delay is None
        and not (c.mode == Mode.PP_SD and c.k != "auto")
    ]


def _best_fixed(results: Results, draft: str) -> tuple[list[float], list[float], list[int]]:
    """The best fixed K's rate at each delay with ``draft``."""
    xs, ys, ks = [], [], []
    for delay in results.delays:
        choice = results.k_choice(delay, draft)
        if choice is not None:
            xs.append(delay)
            ys.append(choice["best_k_tokens_per_s"])
            ks.append(choice["best_k"])
    return xs, ys, ks


def write_plot(path: Path, results: Results, title: str) -> None:
    """Draw the run into ``path`` (PNG)."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
        from matplotlib.ticker import ScalarFormatter
    except ImportError as exc:
        raise FleetguiError(plot_support() or str(exc)) from exc
    figure, (rates, parts) = plt.subplots(1, 2, figsize=(13, 5.5), width_ratios=(3, 2))
    for configuration in _curves(results):
        points = [
            (d, cell.tokens_per_s)
            for d in results.delays
            if (cell := results.cell(configuration, d)) is not None and cell.tokens_per_s
        ]
        if points:
            style = "-o" if configuration.mode != Mode.PP else "-s"
            rates.plot(*zip(*points, strict=True), style, label=configuration.label)
    for draft in dict.fromkeys(c.draft for c in results.configurations if c.draft):
        xs, ys, ks = _best_fixed(results, str(draft))
        if xs:
            rates.plot(xs, ys, ":x", label=f"PP+SD, best fixed K ({draft_name(str(draft))})")
            for x, y, k in zip(xs, ys, ks, strict=True):
                rates.annotate(f"K={k}", (x, y), textcoords="offset points", xytext=(4, 4))
    baseline = next((c for c in results.configurations if c.mode == Measurement.MONOLITHIC), None)
    cell = None if baseline is None else results.cell(baseline, 0.0)
    if baseline is not None and cell is not None and cell.tokens_per_s:
        rates.axhline(cell.tokens_per_s, linestyle="--", color="grey", label=baseline.label)
    rates.set_xlabel("added delay per hop (ms, one way)")
    rates.set_ylabel("decode tokens/s (all streams)")
    rates.set_yscale("log")
    rates.yaxis.set_major_formatter(ScalarFormatter())  # 3, 10, 30 rather than 3x10^0
    rates.yaxis.set_minor_formatter(ScalarFormatter())
    rates.set_xticks(results.delays)
    rates.grid(True, which="both", alpha=0.3)
    rates.legend(fontsize=7)
    _breakdown(parts, results)
    figure.suptitle(title, fontsize=9)
    figure.tight_layout()
    figure.savefig(path, dpi=110)
    plt.close(figure)
    log.info("plot written to %s", path)


def _breakdown(axes: Any, results: Results) -> None:
    """Stacked bars: ms per token of PP and of PP+SD at K auto (the given drafter), by delay."""
    pp = next((c for c in results.configurations if c.key == Mode.PP.value), None)
    sd = next((c for c in results.configurations if c.mode == Mode.PP_SD and c.k == "auto"), None)
    bars = []
    for configuration in (pp, sd):
        if configuration is None:
            continue
        for delay in results.delays:
            cell = results.cell(configuration, delay)
            parts = None if cell is None else cell.breakdown()
            if parts is not None:
                short = "PP" if configuration.mode == Mode.PP else "SD"
                bars.append((f"{short}\n{delay:g}", parts))
    bottoms = [0.0] * len(bars)
    labels = [label for label, _ in bars]
    for name, text in BREAKDOWN_PARTS:
        values = [getattr(parts, name) for _, parts in bars]
        axes.bar(labels, values, bottom=bottoms, label=text)
        bottoms = [b + v for b, v in zip(bottoms, values, strict=True)]
    axes.set_ylabel("ms per token (one stream)")
    axes.set_title("per-token breakdown (PP and PP+SD K auto, by delay)", fontsize=9)
    axes.legend(fontsize=7)
