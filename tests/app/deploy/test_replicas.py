"""The desktop app, offscreen, serving whole copies on a real local fleet (issue 28): two worker
processes on loopback that each hold the tiny model, and two replies at once (PP+MB, 2 streams).

The preview names the copies layout for the 2 streams and says Deploy runs it; Deploy puts a
whole copy on each worker (each worker's session has every stage, this PC none); two chats at once
are answered one on each copy, with the in-process text, and the dashboard says which copy serves
how many streams; a copy's worker killed mid-reply: the reply completes with the uninterrupted
text (replayed on the other copy) and the worker is shown lost.

The app is the fleet tests' (``app`` in ``tests/app/conftest.py``, its helpers in
``app_support``) on two trusted workers (the conftest's ``workers``). The tiny model's layers
take far less than a loopback round trip, and with so little compute two users interleaved on
one copy are predicted as fast as two copies (the planner then rightly keeps one); every PC's
measured layer time is therefore reported 1000 times slower (:class:`BigLayers`), as a model
worth copying would measure."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from pathlib import Path

import pytest

pytest.importorskip("PySide6")
pytest.importorskip("qasync")

from app_support import (
    TIMEOUT_MS,
    App,
    QtBot,
    new_chat,
    reference_tokens,
    send_and_wait,
    show_preview,
    status_of,
)
from fleet_support import WorkerProcess

from fleetgui.app.deploy.interfaces import DeviceSource, MeasuredDevices, MeasureProgress
from fleetgui.fleet.placement.preview import export_stages
from fleetgui.fleet.session.replicas import ReplicatedPipeline
from fleetgui.modes import Mode
from fleetgui.planner import DeviceProfile

pytestmark = pytest.mark.slow

NAMES = ("w1", "w2")
LAYER_FACTOR = 1000.0


class BigLayers(DeviceSource):
    """The app's device profiles with every PC's layer time ``factor`` times longer (see the
    module doc)."""

    def __init__(self, inner: DeviceSource, factor: float) -> None:
        self.inner = inner
        self.factor = factor

    def _slower(self, profiles: tuple[DeviceProfile, ...]) -> tuple[DeviceProfile, ...]:
        return tuple(replace(p, ms_per_layer=p.ms_per_layer * self.factor) for p in profiles)

    def device_profiles(self) -> list[DeviceProfile]:
        return list(self._slower(tuple(self.inner.device_profiles())))

    async def measured_profiles(
        self, model_dir: Path, progress: MeasureProgress | None = None
    ) -> MeasuredDevices:
        measured = await self.inner.measured_profiles(model_dir, progress)
        return replace(measured, profiles=self._slower(measured.profiles))


def copies_of(app: App) -> ReplicatedPipeline:
    copies = app.deployer.replicas
    assert copies is not None and app.core.inference.pipeline is copies
    return copies


def test_the_preview_names_copies_for_two_streams(
    qtbot: QtBot,
    app: App,
    workers: dict[str, WorkerProcess],
    tiny_export: Callable[..., Path],
) -> None:
    view = app.window.fleet_view
    for worker in workers.values():
        view.address.setText(worker.address)
        view.address.returnPressed.emit()
    qtbot.waitUntil(lambda: len(app.controller.usable_endpoints()) == 2, timeout=TIMEOUT_MS)
    panel = app.window.mode_panel
    panel.buttons[Mode.PP_MB].setChecked(True)
    panel.streams.setValue(2)
    assert app.core.inference.mode.concurrency == 2
    app.core.deployment.devices = BigLayers(app.core.deployment.devices, LAYER_FACTOR)
    plan = show_preview(qtbot, app, tiny_export(2))
    layout = app.core.deployment.layout
    assert layout is not None and layout.kind == "copies" and layout.users == 2
    assert sorted(layout.devices) == list(NAMES)
    assert layout.predicted_tokens_per_s > plan.predicted_tokens_per_s
    text = app.window.deploy_view.layout_info.text()
    assert "for 2 user(s): 2 whole copies of the model, one per PC" in text
    assert "Why: the alternatives" in text and "tokens/s in all" in text  # their figures
    assert "Deploy runs 2 whole copies" in text


def test_deploy_puts_a_whole_copy_on_each_worker(
    qtbot: QtBot,
    app: App,
    tiny_export: Callable[..., Path],
) -> None:
    deployment, view = app.core.deployment, app.window.deploy_view
    with qtbot.waitSignal(deployment.deployed, timeout=TIMEOUT_MS):
        view.deploy_button.click()
    qtbot.waitUntil(lambda: deployment.state.value == "idle", timeout=TIMEOUT_MS)
    copies = copies_of(app)
    assert sorted(r.name for r in copies.replicas) == list(NAMES)
    every_stage = tuple(range(len(export_stages(tiny_export(2)))))
    for replica in copies.replicas:
        assignment = replica.session.deployment.assignment
        assert assignment is not None and assignment.local == ()  # this PC runs no stage
        assert [(m.name, m.indices) for m in assignment.members] == [(replica.name, every_stage)]
        qtbot.waitUntil(lambda n=replica.name: status_of(app.window, n).startswith("busy"))  # type: ignore[misc]
    assert app.deployer.session is None  # no single pipeline besides the copies
    assert "2 whole copies" in app.window.pipeline_state.text()


def test_two_chats_at_once_are_answered_one_on_each_copy(
    qtbot: QtBot,
    app: App,
    tiny_export: Callable[..., Path],
) -> None:
    copies = copies_of(app)
    session = app.core.chats
    chats = [new_chat(app.window, max_new_tokens=24) for _ in range(2)]
    shown: set[str] = set()
    finished: list[str] = []

    def watch(*_: object) -> None:
        shown.add(app.window.dashboard.replicas.text())

    def done(conversation: str, _reason: str) -> None:
        finished.append(conversation)

    session.reply_delta.connect(watch)
    session.reply_finished.connect(done)
    try:
        for chat, prompt in zip(chats, ("Once upon a time", "def add(a, b):"), strict=True):
            assert session.send(chat, prompt)
        qtbot.waitUntil(lambda: set(chats) <= set(finished), timeout=TIMEOUT_MS)
    finally:
        session.reply_delta.disconnect(watch)
        session.reply_finished.disconnect(done)
    assert [r.served for r in copies.replicas] == [1, 1]  # one reply on each copy
    # the dashboard said who served what: a stream on each copy at once, then none
    assert any("w1 1 stream" in text and "w2 1 stream" in text for text in shown), shown
    qtbot.waitUntil(lambda: app.window.dashboard.replicas.text().count(" 0 streams") == 2)
    for (_, options), result in zip(app.requests[-2:], app.results[-2:], strict=True):
        assert result.token_ids == reference_tokens(tiny_export(2), result.prompt, options)
    for chat in chats:
        assert session.get(chat).messages[-1].text != ""


def test_a_copy_killed_mid_reply_is_replayed_with_the_same_text(
    qtbot: QtBot,
    app: App,
    workers: dict[str, WorkerProcess],
    tiny_export: Callable[..., Path],
) -> None:
    copies = copies_of(app)
    killed: list[str] = []
    pieces = 0

    def kill_on_second_piece(_: str, __: str) -> None:
        nonlocal pieces
        pieces += 1
        serving = [r.name for r in copies.replicas if r.streams]
        if pieces == 2 and serving:
            killed.append(serving[0])
            workers[serving[0]].kill()

    app.core.chats.reply_delta.connect(kill_on_second_piece)
    try:
        conversation = new_chat(app.window, max_new_tokens=40)
        deltas = send_and_wait(qtbot, app.window, "The old lighthouse keeper")
    finally:
        app.core.chats.reply_delta.disconnect(kill_on_second_piece)
    assert killed and pieces > 2, "the reply went on after the kill"
    _, options = app.requests[-1]
    result = app.results[-1]
    assert result.token_ids == reference_tokens(tiny_export(2), result.prompt, options)
    # nothing sent twice, nothing missing
    assert "".join(deltas) == app.core.chats.get(conversation).messages[-1].text == result.text
    assert copies.replays == 1 and [r.name for r in copies.replicas if r.failed] == killed
    qtbot.waitUntil(lambda: status_of(app.window, killed[0]).startswith("lost"))
    assert f"{killed[0]} lost" in app.window.dashboard.replicas.text()
