"""A build's progress (``fleetgui.training.progress``): its overall fraction through the phases,
and the log when no bar is drawn (issue 26: 79 minutes of silence)."""

from __future__ import annotations

import io
import logging

import pytest
from clock_support import FakeClock

from fleetgui.training.progress import (
    PHASE_WEIGHTS,
    BuildProgress,
    BuildStoppedError,
    CliProgress,
    PhaseTracker,
    ProgressLog,
)


def test_progress_reaches_the_log_at_most_once_per_interval(
    caplog: pytest.LogCaptureFixture,
) -> None:
    clock = FakeClock()
    progress = ProgressLog(interval=30.0, clock=clock)
    caplog.set_level(logging.INFO, logger="fleetgui.training.progress")
    progress(BuildProgress("draft", 0, 400))
    assert len(caplog.records) == 1  # a new phase is said at once
    for step in range(1, 200):  # one step every 0.1 s for 19.9 s: nothing new
        clock.now += 0.1
        progress(BuildProgress("draft", step, 400))
    assert len(caplog.records) == 1
    clock.now += 10.2
    progress(BuildProgress("draft", 200, 400, loss=1.5))
    assert len(caplog.records) == 2
    line = caplog.records[-1].getMessage()
    assert "still building" in line and "200 of 400" in line and "30 s" in line
    clock.now += 29.0
    progress.heartbeat()  # no event for 29 s: not yet
    assert len(caplog.records) == 2
    clock.now += 1.0
    progress.heartbeat()  # a long step without events still reaches the log every 30 s
    assert len(caplog.records) == 3 and "200 of 400" in caplog.records[-1].getMessage()
    progress(BuildProgress("save", 0, 1))
    assert len(caplog.records) == 4 and "saving" in caplog.records[-1].getMessage()


def test_a_silent_stretch_between_phases_still_reaches_the_log(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """Fetching and exporting report no steps: the heartbeat says the build goes on anyway."""
    clock = FakeClock()
    progress = ProgressLog(interval=30.0, clock=clock)
    caplog.set_level(logging.INFO, logger="fleetgui.training.progress")
    clock.now += 30.0
    progress.heartbeat()
    assert [r.getMessage() for r in caplog.records] == ["still working, 30 s elapsed"]
    progress(BuildProgress("save", 1, 1))
    clock.now += 31.0
    progress.heartbeat()
    assert caplog.records[-1].getMessage() == "still working after saving, 61 s elapsed"


def test_the_cli_progress_stops_a_build_once_closed() -> None:
    """A build thread left running after Ctrl+C stops at its next progress event."""
    progress = CliProgress(io.StringIO())
    progress(BuildProgress("draft", 1, 10))
    progress.close()
    with pytest.raises(BuildStoppedError):
        progress(BuildProgress("draft", 2, 10))


def test_progress_fraction_grows_through_the_phases() -> None:
    events: list[BuildProgress] = []
    tracker = PhaseTracker(events.append)
    for phase in PHASE_WEIGHTS:
        with tracker.phase(phase):
            for done in range(1, 4):
                tracker.report(phase, done, 3)
    assert list(dict.fromkeys(e.phase for e in events)) == list(PHASE_WEIGHTS)
    overall = [e.overall for e in events]
    assert overall == sorted(overall)
    assert overall[0] == 0.0
    assert overall[-1] == pytest.approx(1.0)
    assert set(tracker.times) == set(PHASE_WEIGHTS)


def test_the_draft_builds_progress_fraction_uses_its_own_phases() -> None:
    from fleetgui.training.draft_distiller.distiller import PHASE_WEIGHTS
    from fleetgui.training.progress import PhaseTracker

    events: list[BuildProgress] = []
    phases = PhaseTracker(events.append, PHASE_WEIGHTS)
    for name in PHASE_WEIGHTS:
        with phases.phase(name):
            phases.report(name, 1, 2)
    overall = [e.overall for e in events]
    assert overall == sorted(overall) and overall[0] == 0.0
    assert overall[-1] == pytest.approx(1.0)
    assert events[0].label == "loading the target"
