"""The dashboard's "Benchmark this fleet" on a real 2-worker fleet on loopback: the tiny export
deployed as the topology test deploys it (stage 0 here, one stage on each worker, n-gram
drafts), the bench run from the dashboard's panel with few tokens: every configuration measured,
the plot a real image, the table naming every configuration, the chat held back meanwhile and
the app's mode and drafter as they were; then a run cancelled mid-way keeps what it measured and
the chat still answers. One deployment serves both tests. First, what is measured when a draft
model is deployed, and the settings' checks, on plain data."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("PySide6")
pytest.importorskip("qasync")

from app_support import TIMEOUT_MS, QtBot, drive, new_chat, send_and_wait
from PySide6.QtGui import QImage

from fleetgui.app.core import AppCore
from fleetgui.app.dashboard.bench_record import bench_settings, configurations, draft_labels
from fleetgui.app.dashboard.fleet_bench import BenchStep
from fleetgui.app.deploy.fleet import FleetDeployer
from fleetgui.app.deploy.interfaces import DeployRequest
from fleetgui.app.fleet.controller import FleetController
from fleetgui.app.mode import ModeSettings
from fleetgui.app.views.main_window import MainWindow
from fleetgui.modes import Mode
from fleetgui.runtime.draft_source import NGRAM

EXPECTED = {
    "pp",
    "pp+mb/2",
    "pp+mb/3",
    "pp+sd/k1/ngram",
    "pp+sd/kauto/ngram",
    "pp+sd+mb/2/kauto/ngram",
    "pp+sd+mb/3/kauto/ngram",
}
MODE = ModeSettings(Mode.PP_SD, k=3, draft_dir=NGRAM)

Fleet = tuple[AppCore, MainWindow, FleetController]


def test_a_deployed_draft_model_is_measured_beside_ngram_and_drives_the_full_stack() -> None:
    labels = draft_labels(True, Path("/models/draft-1s"))
    assert labels == ["draft-1s", NGRAM]
    assert draft_labels(False, NGRAM) == draft_labels(False, None) == [NGRAM]
    assert draft_labels(True, None)[0] == "draft model"  # installed without a known folder
    keys = [c.key for c in configurations(labels, bench_settings(6, 1, "3,auto"))]
    assert keys == [
        "pp", "pp+mb/2", "pp+mb/3",
        "pp+sd/k3/draft-1s", "pp+sd/kauto/draft-1s", "pp+sd/k3/ngram", "pp+sd/kauto/ngram",
        "pp+sd+mb/2/kauto/draft-1s", "pp+sd+mb/3/kauto/draft-1s",
    ]  # fmt: skip


@pytest.mark.parametrize(
    ("tokens", "repeats", "ks", "error"),
    [(1, 1, "auto", "2 to 4096"), (6, 0, "auto", "1 repeat"), (6, 1, "3,banana", "Ks: each K")],
)
def test_bad_settings_are_refused_with_the_reason(
    tokens: int, repeats: int, ks: str, error: str
) -> None:
    with pytest.raises(ValueError, match=error):
        bench_settings(tokens, repeats, ks)


@pytest.fixture(scope="module")
def deployed(
    fleet_app: Fleet, tiny_export: Callable[..., Path]
) -> Iterator[tuple[AppCore, MainWindow, Any]]:
    """The app serving the 3-stage export over both workers in PP+SD with n-gram drafts; the
    pipeline's drafter and K chooser as deployed, to compare with after each run."""
    export_3s = tiny_export(3)
    core, window, controller = fleet_app
    deadline = time.monotonic() + TIMEOUT_MS / 1000
    while len(controller.usable_endpoints()) < 2:
        assert time.monotonic() < deadline, "the workers did not come up"
        drive(asyncio.sleep(0.1))
    core.set_mode(MODE)
    deployer = core.deployment.deployer
    assert isinstance(deployer, FleetDeployer)
    llm = drive(deployer.deploy(DeployRequest(export_3s, draft_dir=NGRAM), lambda _: None))
    drive(core.inference.install(llm, "exp-3s on the fleet, draft n-gram"))
    pipeline = llm.runtime
    assert deployer.session is not None and len(deployer.session.deployment.assignment.members) == 2
    yield core, window, (pipeline, pipeline.draft, pipeline.new_auto_k)


def start_bench(window: MainWindow, out: Path, tokens: int = 6, ks: str = "1,auto") -> None:
    panel = window.dashboard.bench
    window.core.bench.out_root = out
    window.tabs.setCurrentWidget(window.dashboard)
    panel.tokens.setValue(tokens)
    panel.repeats.setValue(1)
    panel.ks.setText(ks)
    assert panel.start.isEnabled(), panel.start.toolTip()
    panel.start.click()


def assert_as_deployed(core: AppCore, saved: Any) -> None:
    pipeline, draft, new_auto_k = saved
    assert core.inference.pipeline is pipeline
    assert pipeline.draft is draft and pipeline.new_auto_k is new_auto_k
    assert core.inference.mode == MODE and not core.inference.held


@pytest.mark.slow
def test_the_dashboard_benchmarks_the_fleet_and_shows_the_plot_and_the_table(
    qtbot: QtBot, deployed: tuple[AppCore, MainWindow, Any], tmp_path: Path
) -> None:
    core, window, saved = deployed
    panel = window.dashboard.bench
    steps: list[BenchStep] = []
    core.bench.progress.connect(steps.append)
    replied_at: list[BenchStep | None] = []  # the bench's last step when the chat's reply began

    def chat_while_measuring(step: BenchStep) -> None:
        if step.what and step.done == 1 and not replied_at:  # mid-run: a message is sent
            assert not window.chat.hold_note.isHidden()
            conversation = new_chat(window, max_new_tokens=8)
            assert core.chats.send(conversation, "Once upon a time")

    def reply_started(_: int) -> None:
        replied_at.append(steps[-1] if steps else None)

    replies: list[str] = []

    def reply_finished(conversation: str, _reason: str) -> None:
        replies.append(conversation)

    core.bench.progress.connect(chat_while_measuring)
    core.inference.started.connect(reply_started)
    core.chats.reply_finished.connect(reply_finished)
    try:
        with qtbot.waitSignal(core.bench.finished, timeout=TIMEOUT_MS) as done:
            start_bench(window, tmp_path / "bench")
        qtbot.waitUntil(lambda: bool(replies), timeout=TIMEOUT_MS)
    finally:
        core.bench.progress.disconnect(steps.append)
        core.bench.progress.disconnect(chat_while_measuring)
        core.inference.started.disconnect(reply_started)
        core.chats.reply_finished.disconnect(reply_finished)
    report = done.args[0]

    # every configuration, with a positive rate; the progress named each with the count
    cells = {key: cell for (key, _), cell in report.results.cells.items()}
    assert set(cells) == EXPECTED
    assert all((cell.tokens_per_s or 0) > 0 for cell in cells.values()), cells
    measuring = [s for s in steps if s.what and s.total]
    assert len(measuring) == len(EXPECTED) and measuring[-1].left == 1
    assert all("the fleet's own network" in s.what for s in measuring)
    # the chat's message waited for the bench: its reply began after the last configuration
    assert replied_at and replied_at[0] is not None and replied_at[0].left == 0
    assert window.chat.hold_note.isHidden()

    # the plot is a real image, the table names every configuration, the files are saved
    image = QImage(str(report.plot_path))
    assert not image.isNull() and image.width() > 500 and image.height() > 300
    colours = {image.pixel(x, y) for x in range(0, image.width(), 7) for y in range(0, 300, 7)}
    assert len(colours) > 20  # lines, bars and text: not a blank canvas
    table = panel.table.toPlainText()
    for configuration in report.results.configurations:
        assert configuration.label in report.markdown and configuration.label in table
    assert {p.name for p in report.folder.iterdir()} == {"bench.png", "bench.md", "bench.json"}
    assert report.folder.parent == tmp_path / "bench"
    assert str(report.plot_path) in panel.files.text()
    assert not panel.plot.pixmap().isNull() and panel.results.isVisible()
    assert_as_deployed(core, saved)
    assert panel.start.isEnabled() and not panel.cancel.isEnabled()


@pytest.mark.slow
def test_cancel_keeps_what_ran_and_the_chat_still_answers(
    qtbot: QtBot, deployed: tuple[AppCore, MainWindow, Any], tmp_path: Path
) -> None:
    core, window, saved = deployed
    panel = window.dashboard.bench

    def cancel_after_two(step: BenchStep) -> None:
        if not step.what and step.done == 2:
            panel.cancel.click()

    core.bench.progress.connect(cancel_after_two)
    try:
        with qtbot.waitSignal(core.bench.finished, timeout=TIMEOUT_MS) as done:
            start_bench(window, tmp_path / "bench")
    finally:
        core.bench.progress.disconnect(cancel_after_two)
    report = done.args[0]
    measured = len(report.results.cells)
    assert report.info.interrupted and 2 <= measured <= 3 < len(EXPECTED)  # the one under way ends
    assert "stopped early" in panel.status.text() and "interrupted" in report.markdown
    qtbot.waitUntil(lambda: not core.bench.running, timeout=TIMEOUT_MS)
    assert_as_deployed(core, saved)

    new_chat(window, max_new_tokens=8)
    assert send_and_wait(qtbot, window, "The quick brown fox")  # a reply streams as before
    assert_as_deployed(core, saved)
