"""``MetricsFeed``: turns the runtime's metric events into the dashboard's time series.

Per-stage compute ms, tokens/s of all streams and of each chat, TTFT per request, per-hop round
trip, acceptance rate and chosen K, and how many streams each pass carried. Events are recorded
even while the feed is paused; ``updated`` is only held back, so resuming shows everything that
happened meanwhile.

Tokens/s are measured here, over wall time (:mod:`fleetgui.app.dashboard.rates`), for each
stream and for all of them, from ``TokensEmitted``: neither a step's own duration nor the runtime's
``AggregateThroughput`` (which divides by the time since the first step of its window, a few
microseconds when steps arrive in a burst) is a rate. Streams are named by the chat they answer
(:mod:`fleetgui.app.dashboard.stream_labels`); the replies of one chat share a line, broken
between them.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from pathlib import Path

from PySide6.QtCore import QObject, QTimer, Signal

from fleetgui.app.dashboard.metrics_series import (
    ACCEPTANCE,
    BATCH,
    CHOSEN_K,
    HOP_MS,
    STAGE_MS,
    TOKENS_PER_S,
    TTFT,
    ChartSpec,
    SeriesStore,
)
from fleetgui.app.dashboard.rates import RateMeter
from fleetgui.app.dashboard.stream_labels import StreamLabels
from fleetgui.fsutil import atomic_write_text
from fleetgui.runtime.metrics import (
    MetricEvent,
    PassBatched,
    RequestFinished,
    SpeculationRound,
    StageTiming,
    TokensEmitted,
    TransferTiming,
)

log = logging.getLogger(__name__)

SMOOTHING = 0.3  # weight of the newest acceptance rate in its per-stream moving average
UPDATE_INTERVAL_MS = 250  # ``updated`` is emitted at most this often
AGGREGATE = "all streams"
AGGREGATE_IDLE_S = 5.0  # no token from any stream this long: the all-streams rate starts anew
ALL = -1  # the all-streams rate among charted "streams"


class MetricsFeed(QObject):
    """Time series of one app session's metrics."""

    updated = Signal()  # new points (rate-limited; not while paused)
    paused_changed = Signal(bool)

    def __init__(
        self, parent: QObject | None = None, clock: Callable[[], float] = time.monotonic
    ) -> None:
        super().__init__(parent)
        self.store = SeriesStore()
        self.labels = StreamLabels()
        self._clock = clock
        self._t0 = clock()
        self._paused = False
        self._rates: dict[int, RateMeter] = {}  # per stream, until it finishes
        self._all = RateMeter(idle_s=AGGREGATE_IDLE_S)
        self._charted: set[int] = set()  # streams with a tokens/s point (-1: all streams)
        self._acceptance: dict[int, float] = {}
        self._line_owner: dict[tuple[str, str], int] = {}  # (chart, label) -> stream drawing it
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
        self._all.restart()
        self._charted.clear()
        self._acceptance.clear()
        self._line_owner.clear()
        self.updated.emit()

    def export_csv(self, path: Path) -> None:
        atomic_write_text(Path(path), self.store.to_csv())
        log.info("metrics written to %s", path)

    def name_stream(self, stream: int, key: str, title: str) -> None:
        """Stream ``stream`` answers the chat ``key`` titled ``title``: plot it under that
        name (see :mod:`fleetgui.app.dashboard.stream_labels`)."""
        label = self.labels.name(stream, key, title)
        log.debug("stream %d is %r", stream, label)

    def _flush(self) -> None:
        if self._dirty and not self._paused:
            self._dirty = False
            self.updated.emit()

    def _changed(self) -> None:
        self._dirty = True
        if not self._paused and not self._timer.isActive():
            self._timer.start()

    def _stream_point(self, chart: ChartSpec, stream: int, t: float, value: float) -> None:
        """A point of ``stream``'s line; a new stream on a chat's line starts a new piece."""
        label = self.labels.label(stream, t)
        owner = self._line_owner.get((chart.key, label))
        if owner is not None and owner != stream:
            self.store.break_line(chart, label)
        self._line_owner[(chart.key, label)] = stream
        self.store.add(chart, label, t, value)

    def _tokens(self, stream: int, count: int, t: float) -> None:
        rate = self._rates.setdefault(stream, RateMeter()).add(t, count)
        if rate is not None:
            self._stream_point(TOKENS_PER_S, stream, t, rate)
            self._charted.add(stream)
        else:
            self.labels.label(stream, t)  # keeps an unnamed stream's slot while it runs
        total = self._all.add(t, count)
        if len(self._all) == 1:  # the all-streams rate starts anew (after an idle gap)
            self._charted.discard(ALL)
        if total is not None:
            self.store.add(TOKENS_PER_S, AGGREGATE, t, total)
            self._charted.add(ALL)

    def _finished(self, stream: int, ttft_ms: float, t: float) -> None:
        self.store.add(TTFT, "TTFT", t, ttft_ms)
        meter = self._rates.pop(stream, None)
        # a reply too short for a rate while it ran is charted with the rate it had in all
        rate = meter.rate_so_far() if meter is not None and stream not in self._charted else None
        if rate is not None:
            self._stream_point(TOKENS_PER_S, stream, t, rate)
        self._charted.discard(stream)
        self._acceptance.pop(stream, None)
        self.labels.end(stream)
        if not self._rates:  # nothing generates now: the next burst is measured on its own
            total = self._all.rate_so_far() if ALL not in self._charted else None
            if total is not None:
                self.store.add(TOKENS_PER_S, AGGREGATE, t, total)
            self._charted.discard(ALL)
            self._all.restart()

    def record(self, event: MetricEvent) -> None:
        """Add one runtime event (connect to ``InferenceService.metric``)."""
        t = self._clock() - self._t0
        store = self.store
        match event:
            case StageTiming(stage=stage, compute_ms=ms):
                store.add(STAGE_MS, f"stage {stage}", t, ms)
            case TokensEmitted(stream_id=stream, count=count) if count > 0:
                self._tokens(stream, count, t)
            case RequestFinished(stream_id=stream, ttft_ms=ttft):
                self._finished(stream, ttft, t)
            case TransferTiming(hop=hop, ms=ms):
                store.add(HOP_MS, f"hop {hop}", t, ms)
            case PassBatched(streams=streams):
                store.add(BATCH, "streams a pass", t, float(streams))
            case SpeculationRound(stream_id=stream, k=k, accepted=accepted) if k > 0:
                old = self._acceptance.get(stream)
                rate = accepted / k if old is None else old + SMOOTHING * (accepted / k - old)
                self._acceptance[stream] = rate
                self._stream_point(ACCEPTANCE, stream, t, rate)
                self._stream_point(CHOSEN_K, stream, t, float(k))
            case _:
                return
        self._changed()
