"""A run's figures: every configuration's runs per delay and repeat, medians and paired ratios.

A ratio between two configurations is paired: taken within each repeat (both ran at the same
delay, one after the other) and then the median over repeats, so the machine's drift between
repeats cancels out. Pure arithmetic over :class:`~fleetgui.bench.measure.RunFigures`.
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass, field
from typing import Any, Literal

from fleetgui.bench.configurations import Configuration, Measurement, Mode, full_stack
from fleetgui.bench.measure import Breakdown, RunFigures
from fleetgui.fleet.ring.wiring import Wiring

BASELINE_DELAY = -1.0  # the monolithic baseline's cell: it runs on no network


@dataclass
class Cell:
    """One configuration at one delay: a run per repeat (None where it did not run)."""

    configuration: Configuration
    delay_ms: float
    runs: list[RunFigures | None] = field(default_factory=list)

    def done(self) -> list[RunFigures]:
        return [r for r in self.runs if r is not None]

    def median(self, name: str) -> float | None:
        values = [getattr(r, name) for r in self.done() if getattr(r, name) is not None]
        return statistics.median(values) if values else None

    @property
    def tokens_per_s(self) -> float | None:
        return self.median("tokens_per_s")

    def breakdown(self) -> Breakdown | None:
        """Each part's median over the repeats."""
        parts = [r.breakdown for r in self.done() if r.breakdown is not None]
        if not parts:
            return None
        return Breakdown(
            *(
                statistics.median(getattr(b, name) for b in parts)
                for name in ("stage_compute_ms", "transfer_ms", "draft_ms", "coordinator_ms")
            )
        )


@dataclass
class Results:
    """Everything measured so far (a run stopped early keeps what it measured)."""

    configurations: list[Configuration]
    delays: list[float]
    repeats: int
    cells: dict[tuple[str, float], Cell] = field(default_factory=dict)
    hop_ms: dict[float, list[float]] = field(default_factory=dict)  # measured, per delay

    def add(
        self, configuration: Configuration, delay_ms: float, repeat: int, run: RunFigures
    ) -> None:
        delay = delay_ms if configuration.per_delay else BASELINE_DELAY
        cell = self.cells.setdefault(
            (configuration.key, delay), Cell(configuration, delay, [None] * self.repeats)
        )
        cell.runs[repeat] = run

    def cell(self, configuration: Configuration, delay_ms: float) -> Cell | None:
        delay = delay_ms if configuration.per_delay else BASELINE_DELAY
        return self.cells.get((configuration.key, delay))

    def find(self, key: str, delay_ms: float) -> Cell | None:
        return self.cells.get((key, delay_ms))

    def paired(self, over: Cell | None, under: Cell | None) -> float | None:
        """Median over repeats of ``over``'s rate / ``under``'s, in repeats both ran."""
        if over is None or under is None:
            return None
        ratios = [
            a.tokens_per_s / b.tokens_per_s
            for a, b in zip(over.runs, under.runs, strict=True)
            if a is not None and b is not None and b.tokens_per_s > 0
        ]
        return statistics.median(ratios) if ratios else None

    def over_pp(self, cell: Cell) -> float | None:
        """``cell`` over naive PP at the same delay (paired)."""
        if cell.configuration.mode in (Measurement.MONOLITHIC, Measurement.TTFT):
            return None
        return self.paired(cell, self.find(Mode.PP.value, cell.delay_ms))

    def speculative(self, delay_ms: float, draft: str) -> list[Cell]:
        """PP+SD's cells at ``delay_ms`` with ``draft``, fixed Ks by K, then K auto."""
        cells = [
            c
            for c in self.cells.values()
            if c.delay_ms == delay_ms
            and c.configuration.mode == Mode.PP_SD
            and c.configuration.draft == draft
        ]
        return sorted(cells, key=lambda c: _k_order(c.configuration.k))

    def k_choice(self, delay_ms: float, draft: str) -> dict[str, Any] | None:
        """K auto against the best fixed K at ``delay_ms`` with ``draft``: the best K, both
        rates, and K auto's rate over the best fixed K's (paired)."""
        cells = self.speculative(delay_ms, draft)
        fixed = [c for c in cells if c.configuration.k != "auto" and c.tokens_per_s]
        auto = next((c for c in cells if c.configuration.k == "auto"), None)
        if not fixed or auto is None or not auto.tokens_per_s:
            return None
        best = max(fixed, key=lambda c: c.tokens_per_s or 0.0)
        return {
            "draft": draft,
            "best_k": best.configuration.k,
            "best_k_tokens_per_s": best.tokens_per_s,
            "auto_tokens_per_s": auto.tokens_per_s,
            "auto_mean_k": auto.median("mean_k"),
            "auto_over_best": self.paired(auto, best),
        }

    def summary(self) -> dict[str, Any]:
        """The issue's headline figures, per delay."""
        stack = full_stack(self.configurations)
        drafts = list(dict.fromkeys(c.draft for c in self.configurations if c.draft))
        out: dict[str, Any] = {
            "full_stack": None if stack is None else stack.key,
            "full_stack_over_pp": {},
            "k_auto_vs_best_fixed": {},
            "ring_over_hub": None,
        }
        for delay in self.delays:
            if stack is not None:
                ratio = self.paired(self.find(stack.key, delay), self.find(Mode.PP.value, delay))
                out["full_stack_over_pp"][delay_key(delay)] = ratio
            out["k_auto_vs_best_fixed"][delay_key(delay)] = [
                choice for d in drafts if (choice := self.k_choice(delay, d)) is not None
            ]
        hub = next((c for c in self.configurations if c.topology is Wiring.HUB), None)
        if hub is not None and hub.at_delay is not None:
            ratio = self.paired(
                self.find(Mode.PP.value, hub.at_delay), self.find(hub.key, hub.at_delay)
            )
            out["ring_over_hub"] = {"delay_ms": hub.at_delay, "ratio": ratio}
        return out

    def measured_hop_ms(self) -> dict[str, float]:
        return {delay_key(d): statistics.median(v) for d, v in self.hop_ms.items() if v}


def delay_key(delay_ms: float) -> str:
    """A delay as a JSON object key: ``25`` or ``12.5``."""
    return f"{delay_ms:g}"


def _k_order(k: int | Literal["auto"]) -> tuple[bool, int]:
    """Fixed Ks in increasing order, then K auto."""
    return (k == "auto", k if isinstance(k, int) else 0)
