"""Time series of the dashboard, as plain data: charts of named series of (seconds, value).

A series holds breaks: a point with a NaN value where its line must not be drawn (the chart
draws with ``connect="finite"``). A break goes in when a series has had no data for a while
(the fleet was idle: a line straight across the gap would show values nobody measured), and
where the caller says so (:meth:`SeriesStore.break_line`, e.g. between two replies that share a
line). Breaks are not data: the CSV export and :meth:`SeriesStore.total_points` leave them out.
"""

from __future__ import annotations

import collections
import csv
import io
import logging
import math
import statistics
from dataclasses import dataclass

log = logging.getLogger(__name__)

MAX_POINTS = 5000  # per series, breaks included; older points are dropped
# A series breaks when no point came for IDLE_GAP_S, or for GAP_FACTOR times its usual interval
# if that is longer: a slow series (a point every few seconds) is then still a line.
IDLE_GAP_S = 3.0
GAP_FACTOR = 5.0
RECENT_INTERVALS = 16  # how many recent intervals "usual" is the median of


@dataclass(frozen=True)
class ChartSpec:
    key: str
    title: str
    unit: str


STAGE_MS = ChartSpec("stage_ms", "Per-stage compute", "ms")
TOKENS_PER_S = ChartSpec("tokens_per_s", "Tokens/s (all streams and per chat)", "tokens/s")
TTFT = ChartSpec("ttft_ms", "Time to first token, per request", "ms")
HOP_MS = ChartSpec("hop_ms", "Ring transfer per pass (all hops)", "ms")
ACCEPTANCE = ChartSpec("acceptance", "Draft acceptance rate", "fraction")
CHOSEN_K = ChartSpec("k", "Chosen K", "tokens")
BATCH = ChartSpec("batch", "Streams in each pass (continuous batching)", "streams")
CHARTS = (STAGE_MS, TOKENS_PER_S, TTFT, HOP_MS, ACCEPTANCE, CHOSEN_K, BATCH)


class Series:
    """One line: x in seconds since the dashboard started, y in its chart's unit (NaN: a
    break)."""

    def __init__(
        self, name: str, max_points: int = MAX_POINTS, idle_gap_s: float = IDLE_GAP_S
    ) -> None:
        self.name = name
        self.x: collections.deque[float] = collections.deque(maxlen=max_points)
        self.y: collections.deque[float] = collections.deque(maxlen=max_points)
        self.idle_gap_s = idle_gap_s
        self._intervals: collections.deque[float] = collections.deque(maxlen=RECENT_INTERVALS)
        self._last_x: float | None = None

    def append(self, x: float, y: float) -> None:
        """Add a point, after a break if the series was idle since its last point."""
        if self._last_x is not None:
            gap = x - self._last_x
            usual = statistics.median(self._intervals) if self._intervals else 0.0
            if gap > max(self.idle_gap_s, GAP_FACTOR * usual):
                self.break_line()
            self._intervals.append(gap)
        self._last_x = x
        self.x.append(x)
        self.y.append(y)

    def break_line(self) -> None:
        """End the line here: the next point starts a new one."""
        if self.y and not math.isnan(self.y[-1]):
            self.x.append(self.x[-1])
            self.y.append(math.nan)

    @property
    def points(self) -> int:
        """Data points (breaks left out)."""
        return len(self.y) - sum(map(math.isnan, self.y))

    def __len__(self) -> int:
        """Entries, breaks included (what a chart is given)."""
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

    def break_line(self, chart: ChartSpec, name: str) -> None:
        """End series ``name``'s line at its last point (nothing if it has none)."""
        series = self._charts[chart.key].get(name)
        if series is not None:
            series.break_line()

    def series(self, chart: ChartSpec) -> list[Series]:
        return list(self._charts[chart.key].values())

    def get(self, chart: ChartSpec, name: str) -> Series | None:
        return self._charts[chart.key].get(name)

    def total_points(self) -> int:
        """Data points of every series (breaks left out)."""
        return sum(s.points for chart in self._charts.values() for s in chart.values())

    def clear(self) -> None:
        for chart in self._charts.values():
            chart.clear()

    def to_csv(self) -> str:
        """Long format: ``chart,series,unit,t_s,value``, one row per point (no breaks)."""
        out = io.StringIO()
        writer = csv.writer(out, lineterminator="\n")
        writer.writerow(["chart", "series", "unit", "t_s", "value"])
        for chart in CHARTS:
            for series in self.series(chart):
                for x, y in zip(series.x, series.y, strict=True):
                    if not math.isnan(y):
                        writer.writerow(
                            [chart.key, series.name, chart.unit, f"{x:.4f}", f"{y:.6g}"]
                        )
        return out.getvalue()
