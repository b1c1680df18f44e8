"""``MetricsFeed``: turns the runtime's metric events into the dashboard's time series.

Per-stage compute ms, aggregate and per-stream tokens/s, TTFT per request, per-hop round trip,
acceptance rate and chosen K. Events are recorded even while the feed is paused; ``updated`` is
only held back, so resuming shows everything that happened meanwhile.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from pathlib import Path

from PySide6.QtCore import QObject, QTimer, Signal

from fleetgui.app.metrics_series import (
    ACCEPTANCE,
    CHOSEN_K,
    HOP_MS,
    STAGE_MS,
    TOKENS_PER_S,
    TTFT,
    SeriesStore,
)
from fleetgui.fsutil import atomic_write_text
from fleetgui.runtime.metrics import (
    AggregateThroughput,
    MetricEvent,
    RequestFinished,
    SpeculationRound,
    StageTiming,
    TokensEmitted,
    TransferTiming,
)

log = logging.getLogger(__name__)

SMOOTHING = 0.3  # weight of the newest per-stream rate and acceptance in their moving averages
UPDATE_INTERVAL_MS = 250  # ``updated`` is emitted at most this often
AGGREGATE = "all streams"


class MetricsFeed(QObject):
    """Time series of one app session's metrics."""

    updated = Signal()  # new points (rate-limited; not while paused)
    paused_changed = Signal(bool)

    def __init__(
        self, parent: QObject | None = None, clock: Callable[[], float] = time.monotonic
    ) -> None:
        super().__init__(parent)
        self.store = SeriesStore()
        self._clock = clock
        self._t0 = clock()
        self._paused = False
        self._rates: dict[int, float] = {}
        self._acceptance: dict[int, float] = {}
        self._dirty = False
        self._timer = QTimer(self)
        self._timer.setInterval(UPDATE_INTERVAL_MS)
        self._timer.setSingleShot(True)
        self._timer.timeout.connect(self._flush)

    @property
    def paused(self) -> bool:
        return self._paused

    def set_paused(self, paused: bool) -> None:
        if paused == self._paused:
            return
        self._paused = paused
        self.paused_changed.emit(paused)
        if not paused:
            self._flush()

    def clear(self) -> None:
        self.store.clear()
        self._rates.clear()
        self._acceptance.clear()
        self.updated.emit()

    def export_csv(self, path: Path) -> None:
        atomic_write_text(Path(path), self.store.to_csv())
        log.info("metrics written to %s", path)

    def _flush(self) -> None:
        if self._dirty and not self._paused:
            self._dirty = False
            self.updated.emit()

    def _changed(self) -> None:
        self._dirty = True
        if not self._paused and not self._timer.isActive():
            self._timer.start()

    def _smooth(self, table: dict[int, float], key: int, value: float) -> float:
        old = table.get(key)
        table[key] = value if old is None else old + SMOOTHING * (value - old)
        return table[key]

    def record(self, event: MetricEvent) -> None:
        """Add one runtime event (connect to ``InferenceService.metric``)."""
        t = self._clock() - self._t0
        store = self.store
        match event:
            case StageTiming(stage=stage, compute_ms=ms):
                store.add(STAGE_MS, f"stage {stage}", t, ms)
            case TokensEmitted(stream_id=stream, count=count, step_ms=step_ms) if (
                count > 0 and step_ms > 0
            ):
                rate = self._smooth(self._rates, stream, count * 1000.0 / step_ms)
                store.add(TOKENS_PER_S, f"stream {stream}", t, rate)
            case AggregateThroughput(tokens_per_s=rate):
                store.add(TOKENS_PER_S, AGGREGATE, t, rate)
            case RequestFinished(stream_id=stream, ttft_ms=ttft):
                store.add(TTFT, "TTFT", t, ttft)
                self._rates.pop(stream, None)
                self._acceptance.pop(stream, None)
            case TransferTiming(hop=hop, ms=ms):
                store.add(HOP_MS, f"hop {hop}", t, ms)
            case SpeculationRound(stream_id=stream, k=k, accepted=accepted) if k > 0:
                rate = self._smooth(self._acceptance, stream, accepted / k)
                store.add(ACCEPTANCE, f"stream {stream}", t, rate)
                store.add(CHOSEN_K, f"stream {stream}", t, float(k))
            case _:
                return
        self._changed()
