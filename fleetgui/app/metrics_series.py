"""Time series of the dashboard, as plain data: charts of named series of (seconds, value)."""

from __future__ import annotations

import collections
import csv
import io
import logging
from dataclasses import dataclass

log = logging.getLogger(__name__)

MAX_POINTS = 5000  # per series; older points are dropped


@dataclass(frozen=True)
class ChartSpec:
    key: str
    title: str
    unit: str


STAGE_MS = ChartSpec("stage_ms", "Per-stage compute", "ms")
TOKENS_PER_S = ChartSpec("tokens_per_s", "Tokens/s (aggregate and per stream)", "tokens/s")
TTFT = ChartSpec("ttft_ms", "Time to first token, per request", "ms")
HOP_MS = ChartSpec("hop_ms", "Per-hop round trip", "ms")
ACCEPTANCE = ChartSpec("acceptance", "Draft acceptance rate", "fraction")
CHOSEN_K = ChartSpec("k", "Chosen K", "tokens")
CHARTS = (STAGE_MS, TOKENS_PER_S, TTFT, HOP_MS, ACCEPTANCE, CHOSEN_K)


class Series:
    """One line: x in seconds since the dashboard started, y in its chart's unit."""

    def __init__(self, name: str, max_points: int = MAX_POINTS) -> None:
        self.name = name
        self.x: collections.deque[float] = collections.deque(maxlen=max_points)
        self.y: collections.deque[float] = collections.deque(maxlen=max_points)

    def append(self, x: float, y: float) -> None:
        self.x.append(x)
        self.y.append(y)

    def __len__(self) -> int:
        return len(self.y)


class SeriesStore:
    """Every chart's series by name, in the order they first appeared."""

    def __init__(self) -> None:
        self._charts: dict[str, dict[str, Series]] = {chart.key: {} for chart in CHARTS}

    def add(self, chart: ChartSpec, name: str, x: float, y: float) -> None:
        series = self._charts[chart.key].get(name)
        if series is None:
            series = self._charts[chart.key][name] = Series(name)
        series.append(x, y)

    def series(self, chart: ChartSpec) -> list[Series]:
        return list(self._charts[chart.key].values())

    def get(self, chart: ChartSpec, name: str) -> Series | None:
        return self._charts[chart.key].get(name)

    def total_points(self) -> int:
        return sum(len(s) for chart in self._charts.values() for s in chart.values())

    def clear(self) -> None:
        for chart in self._charts.values():
            chart.clear()

    def to_csv(self) -> str:
        """Long format: ``chart,series,unit,t_s,value``, one row per point."""
        out = io.StringIO()
        writer = csv.writer(out, lineterminator="\n")
        writer.writerow(["chart", "series", "unit", "t_s", "value"])
        for chart in CHARTS:
            for series in self.series(chart):
                for x, y in zip(series.x, series.y, strict=True):
                    writer.writerow([chart.key, series.name, chart.unit, f"{x:.4f}", f"{y:.6g}"])
        return out.getvalue()
