"""Progress of a demo model build: events for a callback (the app) and a tqdm bar (the CLI)."""

from __future__ import annotations

import logging
import sys
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from typing import TYPE_CHECKING, TextIO

if TYPE_CHECKING:
    from tqdm import tqdm

log = logging.getLogger(__name__)

#: Build phases in order, with their rough share of the build time (for an overall fraction).
PHASE_WEIGHTS: dict[str, float] = {
    "corpus": 0.01,
    "tokenizer": 0.04,
    "target": 0.60,
    "distill-data": 0.10,
    "draft": 0.20,
    "acceptance": 0.03,
    "save": 0.02,
}
PHASE_LABELS: dict[str, str] = {
    "corpus": "reading stdlib sources",
    "tokenizer": "training tokenizer",
    "target": "training target",
    "distill-data": "target continuations",
    "draft": "distilling draft",
    "acceptance": "measuring acceptance and code",
    "save": "saving",
    "load-target": "loading the target",
    "continuations": "target answers",
    "measure": "measuring acceptance",
}


@dataclass(frozen=True)
class BuildProgress:
    """One progress report: ``done`` of ``total`` units of ``phase`` (steps, batches...)."""

    phase: str
    done: int
    total: int
    loss: float | None = None
    #: phase shares of another kind of build (default :data:`PHASE_WEIGHTS`)
    weights: Mapping[str, float] | None = None

    @property
    def label(self) -> str:
        """Human-readable phase name."""
        return PHASE_LABELS.get(self.phase, self.phase)

    @property
    def overall(self) -> float:
        """Estimated fraction of the whole build that is done, in [0, 1]."""
        before = 0.0
        weights = PHASE_WEIGHTS if self.weights is None else self.weights
        for phase, weight in weights.items():
            if phase == self.phase:
                share = self.done / self.total if self.total else 1.0
                return min(1.0, before + weight * share)
            before += weight
        return 1.0


#: Called with every :class:`BuildProgress`; may raise to abort the build (nothing is kept).
ProgressCallback = Callable[[BuildProgress], None]


class PhaseTracker:
    """Times the build phases and forwards progress events to a callback."""

    def __init__(
        self, progress: ProgressCallback | None, weights: Mapping[str, float] | None = None
    ) -> None:
        self.progress = progress
        self.weights = weights
        self.times: dict[str, float] = {}
        self.started = time.perf_counter()
        self._totals: dict[str, int] = {}

    def report(self, phase: str, done: int, total: int, loss: float | None = None) -> None:
        """Forward one event."""
        self._totals[phase] = total
        if self.progress is not None:
            self.progress(BuildProgress(phase, done, total, loss, self.weights))

    def steps(self, phase: str) -> Callable[[int, int, float], None]:
        """An ``on_step(done, total, loss)`` callback reporting ``phase``."""
        return lambda done, total, loss: self.report(phase, done, total, loss)

    def batches(self, phase: str) -> Callable[[int, int], None]:
        """An ``on_batch(done, total)`` callback reporting ``phase``."""
        return lambda done, total: self.report(phase, done, total)

    @contextmanager
    def phase(self, name: str) -> Iterator[None]:
        """Time the body as phase ``name``; report its start and its end."""
        self.report(name, 0, 1)
        start = time.perf_counter()
        yield
        self.times[name] = round(time.perf_counter() - start, 2)
        total = self._totals.get(name, 1)
        self.report(name, total, total)
        log.info("demo build: %s done in %.1f s", name, self.times[name])


class TqdmProgress:
    """A :data:`ProgressCallback` drawing one tqdm bar per phase (to stderr by default).

    ``disable=None`` draws only when the file is a terminal (tqdm's rule); False always draws.
    """

    def __init__(self, file: TextIO | None = None, disable: bool | None = None) -> None:
        self._file = file if file is not None else sys.stderr
        self._disable = disable
        self._bar: tqdm | None = None
        self._phase: str | None = None

    def __call__(self, event: BuildProgress) -> None:
        from tqdm import tqdm

        if event.phase != self._phase or self._bar is None:
            self.close()
            self._phase = event.phase
            self._bar = tqdm(
                total=event.total,
                desc=f"{event.label:<22}",
                file=self._file,
                disable=self._disable,
                leave=True,
                dynamic_ncols=True,
            )
        bar = self._bar
        if bar.total != event.total:
            bar.total = event.total
            bar.refresh()
        if event.loss is not None:
            bar.set_postfix(loss=f"{event.loss:.3f}", refresh=False)
        bar.update(event.done - bar.n)

    def close(self) -> None:
        """Finish the current bar."""
        if self._bar is not None:
            self._bar.close()
            self._bar = None


class ProgressLog:
    """A :data:`ProgressCallback` writing the build's progress to the log: each new phase at
    once, then at most one "still building" line per ``interval`` seconds. Where no bar is drawn
    (output not on a terminal) it is all a log shows of a build that can take an hour.

    :meth:`heartbeat` repeats the latest state when no event came for ``interval`` (a thread
    calls it: some steps, such as the export, report nothing for minutes)."""

    def __init__(self, interval: float = 30.0, clock: Callable[[], float] = time.monotonic) -> None:
        self.interval = interval
        self._clock = clock
        self._lock = threading.Lock()
        self._latest: BuildProgress | None = None
        self._started = clock()
        self._logged = float("-inf")

    def __call__(self, event: BuildProgress) -> None:
        with self._lock:
            new_phase = self._latest is None or self._latest.phase != event.phase
            self._latest = event
            if new_phase:
                self._log(event, "building")
            elif self._clock() - self._logged >= self.interval:
                self._log(event, "still building")

    def heartbeat(self) -> None:
        """Log the latest state if nothing was logged for ``interval``."""
        with self._lock:
            now = self._clock()
            if now - self._logged < self.interval:
                return
            latest = self._latest
            if latest is not None and latest.done < latest.total:
                self._log(latest, "still building")
                return
            # between reported phases (fetching, exporting): no step to name
            self._logged = now
            after = f" after {latest.label}" if latest is not None else ""
            log.info("still working%s, %.0f s elapsed", after, now - self._started)

    def _log(self, event: BuildProgress, what: str) -> None:
        now = self._clock()
        self._logged = now
        loss = f", loss {event.loss:.3f}" if event.loss is not None else ""
        log.info(
            "%s: %s, step %d of %d (%.0f%% overall%s), %.0f s elapsed",
            what, event.label, event.done, event.total, 100 * event.overall, loss,
            now - self._started,
        )  # fmt: skip


class BuildStoppedError(Exception):
    """Raised into a build by its progress callback once the command stopped (Ctrl+C)."""


class CliProgress:
    """The commands' build progress: a tqdm bar on a terminal, else :class:`ProgressLog` lines
    (with a heartbeat thread) in the log. After :meth:`close` the next event raises
    :class:`BuildStoppedError`, so a build left running in a thread (an interrupted
    ``asyncio.to_thread``) stops at its next step instead of running on to the end."""

    def __init__(self, file: TextIO | None = None, interval: float = 30.0) -> None:
        stream = file if file is not None else sys.stderr
        self._bar = TqdmProgress(stream)
        self._log = None if _is_terminal(stream) else ProgressLog(interval)
        self._closed = threading.Event()
        self._thread: threading.Thread | None = None
        if self._log is not None:
            self._thread = threading.Thread(
                target=self._beat, args=(self._log,), name="build-progress", daemon=True
            )
            self._thread.start()

    def __call__(self, event: BuildProgress) -> None:
        if self._closed.is_set():
            raise BuildStoppedError("the build was stopped")
        self._bar(event)
        if self._log is not None:
            self._log(event)

    def _beat(self, progress: ProgressLog) -> None:
        while not self._closed.wait(progress.interval / 3):
            progress.heartbeat()

    def close(self) -> None:
        """Finish the bar, stop the heartbeat; later events stop the build."""
        self._closed.set()
        self._bar.close()


def _is_terminal(stream: TextIO) -> bool:
    try:
        return stream.isatty()
    except (AttributeError, ValueError):  # a closed or unusual stream: treat as a file
        return False
