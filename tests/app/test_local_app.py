"""The desktop app, offscreen, driving the real window against a real tiny export in-process:
deploy, chat with streamed replies, stop, regenerate, history, mode and K, charts, screenshots.
(The fleet is not there yet: deployment is on this PC.)"""

from __future__ import annotations

import asyncio
import os
import re
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("PySide6")
pytest.importorskip("qasync")

from app_support import TIMEOUT_MS, QtBot, deploy, make_window, new_chat, send_and_wait
from PySide6.QtCore import Qt

from fleetgui.app.chat.chats import Chats
from fleetgui.app.chat.conversation import ASSISTANT, USER
from fleetgui.app.chat.history import HistoryStore
from fleetgui.app.core import AppCore
from fleetgui.app.dashboard.metrics_series import ACCEPTANCE, CHOSEN_K, STAGE_MS, TOKENS_PER_S, TTFT
from fleetgui.app.deploy.model_choice import ModelKind
from fleetgui.app.fleet.worker_status import WorkerStatus
from fleetgui.app.views.main_window import MainWindow
from fleetgui.export.manifest import read_manifest
from fleetgui.fleet.profiling.this_pc import coordinator_name
from fleetgui.generation_config import GenerationConfig
from fleetgui.modes import Mode
from fleetgui.net.worker_info import WorkerInfo
from fleetgui.runtime.kv_budget import kv_bytes_per_token_per_layer, kv_element_bytes


@pytest.fixture(scope="module")
def app(
    qloop: asyncio.AbstractEventLoop,
    tiny_exports_2s_draft: dict[str, Path],
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[tuple[AppCore, MainWindow, Path]]:
    folder = tmp_path_factory.mktemp("app_home")
    core, window = make_window(folder)
    yield core, window, folder
    core.chats.stop_all()
    window.close()


def test_without_a_model_the_chat_says_how_to_fix_it(
    qtbot: QtBot, qloop: Any, tmp_path: Path
) -> None:
    core, window = make_window(tmp_path)
    qtbot.addWidget(window)
    conversation = core.chats.new_conversation()
    with qtbot.waitSignal(core.chats.reply_failed, timeout=TIMEOUT_MS) as failed:
        core.chats.send(conversation, "hello")
    assert "Deploy" in failed.args[1]
    assert window.messages.isVisible() and "Deploy" in window.messages.label.text()
    assert not core.chats.is_busy(conversation)


def test_deploy_plan_and_a_streamed_reply(
    qtbot: QtBot, app: Any, tiny_exports_2s_draft: dict[str, Path]
) -> None:
    core, window, _ = app
    deploy(qtbot, core, window, tiny_exports_2s_draft["2s"])
    assert core.inference.pipeline is not None
    assert "ready" in window.pipeline_state.text()
    assert core.deployment.plan is not None  # deploy planned first
    with qtbot.waitSignal(core.deployment.plan_ready, timeout=TIMEOUT_MS):
        window.deploy_view.preview_requested.emit()
    assert window.deploy_view.plan_table.rowCount() == 1
    assert "tokens/s" in window.deploy_view.plan_summary.text()

    conversation = new_chat(window)
    deltas = send_and_wait(qtbot, window, "Once upon a time")
    messages = core.chats.get(conversation).messages
    assert [m.role for m in messages] == [USER, ASSISTANT]
    assert len(deltas) >= 2, "the reply should arrive in several pieces"
    assert "".join(deltas) == messages[-1].text != ""
    assert messages[-1].tokens > 0
    assert window.chat.input.toPlainText() == ""
    assert "Assistant" in window.chat.transcript.toPlainText()
    # the tiny model has no chat template: the chat says it is sent as a plain transcript
    assert not window.chat.format_note.isHidden()
    assert "no chat template" in window.chat.format_note.text()


def test_regenerate_replaces_the_reply(qtbot: QtBot, app: Any) -> None:
    core, window, _ = app
    conversation = window.chat_presenter.current_conversation
    before = list(core.chats.get(conversation).messages)
    with qtbot.waitSignal(core.chats.reply_finished, timeout=TIMEOUT_MS):
        window.chat.regenerate_button.click()
    after = core.chats.get(conversation).messages
    assert len(after) == len(before)
    assert after[-1].text == before[-1].text  # greedy: the same reply again
    assert after[-1].created > before[-1].created


def test_esc_stops_a_reply_and_keeps_its_text(qtbot: QtBot, app: Any) -> None:
    core, window, _ = app
    conversation = new_chat(window, max_new_tokens=4000)
    session = core.chats
    window.chat.input.setPlainText("Tell me a long story")
    with qtbot.waitSignal(session.reply_delta, timeout=TIMEOUT_MS):
        window.chat.send_button.click()
    assert session.is_busy(conversation) and window.chat.stop_button.isEnabled()
    with qtbot.waitSignal(session.reply_finished, timeout=TIMEOUT_MS) as finished:
        qtbot.keyClick(window.chat.input, Qt.Key.Key_Escape)
    assert finished.args == [conversation, "stopped"]
    last = session.get(conversation).messages[-1]
    assert last.role == ASSISTANT and last.finish_reason == "stopped" and last.text
    # its counts, as a finished reply's (issue 39: a stopped reply showed none)
    assert last.tokens > 0 and last.ttft_ms > 0
    assert f"{last.tokens} tokens" in window.chat.transcript.toPlainText()
    assert not session.is_busy(conversation) and not window.chat.stop_button.isEnabled()
    pipeline = core.inference.pipeline
    stages = pipeline.route.stages  # type: ignore[union-attr]
    resident = pipeline.resident  # type: ignore[union-attr]
    kept = {parked.stream_id for parked in resident.idle()}
    assert kept  # the conversation's KV stays for its next turn; nothing else stays
    qtbot.waitUntil(lambda: all(set(stage.stream_ids()) <= kept for stage in stages))


def test_a_chats_next_turn_keeps_its_kv_and_the_reply_says_how_much(
    qtbot: QtBot, app: Any, tiny_exports_2s_draft: dict[str, Path]
) -> None:
    core, window, _ = app
    conversation = new_chat(window, max_new_tokens=12)
    send_and_wait(
        qtbot, window, "Please write a short Python function that adds two numbers and prints them."
    )
    send_and_wait(qtbot, window, "Now make it multiply them instead.")
    first, second = [m for m in core.chats.get(conversation).messages if m.role == ASSISTANT]
    assert first.cached_tokens == 0 and second.cached_tokens > 0
    assert f"{second.cached_tokens:,} of the chat kept" in window.chat.transcript.toPlainText()
    # the dashboard and the fleet view say what it reused and the KV this PC holds for it
    reused = f"last reply reused {second.cached_tokens:,} prompt tokens"
    qtbot.waitUntil(lambda: reused in window.dashboard.kv.text())
    pipeline = core.inference.pipeline
    held = pipeline.kv_held()  # type: ignore[union-attr]
    stages = pipeline.route.stages  # type: ignore[union-attr]
    manifest = read_manifest(tiny_exports_2s_draft["2s"])
    element = kv_element_bytes(stages[0].config.precision, stages[0].config.kv_cache_precision)
    per_layer = kv_bytes_per_token_per_layer(manifest.config, element)
    assert sum(s.kv_token_bytes(element) for s in stages) == per_layer * manifest.n_layers
    assert held.idle_tokens == held.tokens >= second.cached_tokens + second.tokens
    here = window.topology.update_now().node(coordinator_name())
    assert here is not None and here.kv_bytes == held.tokens * per_layer * manifest.n_layers
    assert "KV" in here.memory_text and "KV in use: this PC" in window.dashboard.kv.text()


def test_history_is_restored_by_a_new_store(app: Any) -> None:
    core, _, folder = app
    restored = Chats(core.inference, HistoryStore(folder / "chats"))
    old = {c.id: c for c in core.chats.conversations()}
    new = {c.id: c for c in restored.conversations()}
    assert new.keys() == old.keys() and len(new) >= 2
    for cid, conversation in old.items():
        assert [(m.role, m.text) for m in new[cid].messages] == [
            (m.role, m.text) for m in conversation.messages
        ]
        assert new[cid].config == conversation.config


def test_switch_mode_and_k_and_the_charts_follow(
    qtbot: QtBot, app: Any, tiny_exports_2s_draft: dict[str, Path], tmp_path: Path
) -> None:
    core, window, _ = app
    panel = window.mode_panel
    panel.draft.setText(str(tiny_exports_2s_draft["draft"]))
    panel.buttons[Mode.PP_SD].setChecked(True)
    panel.k_auto.setChecked(False)
    panel.k.setValue(3)
    mode = core.inference.mode
    assert (mode.mode, mode.k, mode.draft_dir) == (Mode.PP_SD, 3, tiny_exports_2s_draft["draft"])
    assert core.settings.values.mode == "pp+sd" and core.settings.values.k == 3
    assert "K 3" in window.mode_state.text()
    deploy(qtbot, core, window, tiny_exports_2s_draft["2s"])  # again, with the draft
    assert core.inference.has_draft

    store = core.feed.store
    points_before = store.total_points()
    new_chat(window, max_new_tokens=20)
    send_and_wait(qtbot, window, "The quick brown fox")
    ks = store.get(CHOSEN_K, next(s.name for s in store.series(CHOSEN_K))).y
    assert ks and max(ks) <= 3
    assert store.series(ACCEPTANCE)
    for chart in (STAGE_MS, TOKENS_PER_S, TTFT):
        assert store.series(chart), chart.title
    assert store.total_points() > points_before
    qtbot.waitUntil(lambda: ("k", store.series(CHOSEN_K)[0].name) in window.dashboard.curves)
    qtbot.waitUntil(
        lambda: (
            len(window.dashboard.curves[("stage_ms", "stage 0")].xData)
            == len(store.get(STAGE_MS, "stage 0"))
        )
    )

    panel.k_auto.setChecked(True)
    assert core.inference.mode.k == "auto"

    # pause: points are still recorded, the charts stop updating until resumed
    window.dashboard.pause.click()
    assert core.feed.paused
    drawn = len(window.dashboard.curves[("stage_ms", "stage 0")].xData)
    send_and_wait(qtbot, window, "Again")
    qtbot.wait(400)
    assert len(window.dashboard.curves[("stage_ms", "stage 0")].xData) == drawn
    assert len(store.get(STAGE_MS, "stage 0")) > drawn
    window.dashboard.pause.click()
    qtbot.waitUntil(lambda: len(window.dashboard.curves[("stage_ms", "stage 0")].xData) > drawn)
    window.dashboard.csv_requested.emit(str(tmp_path / "metrics.csv"))
    rows = (tmp_path / "metrics.csv").read_text().splitlines()
    assert rows[0] == "chart,series,unit,t_s,value" and len(rows) == store.total_points() + 1
    assert window.dashboard.save_png(tmp_path / "charts.png")
    assert (tmp_path / "charts.png").stat().st_size > 1000


def test_two_conversations_reply_at_once_each_with_its_own_sampling(qtbot: QtBot, app: Any) -> None:
    """In PP+SD+MB with 2 streams a greedy chat and a sampled one (temperature 0.9, top-p 0.95,
    seed 7) generate at the same time; the greedy one gives the greedy reply, the sampled one the
    same text again when regenerated with its seed (at a fixed K: speculative sampling draws its
    random numbers per round, so K auto, which follows measured timings, may change the text),
    and not the greedy text."""
    core, window, _ = app
    window.mode_panel.buttons[Mode.PP_SD_MB].setChecked(True)
    window.mode_panel.streams.setValue(2)
    window.mode_panel.k_auto.setChecked(False)
    window.mode_panel.k.setValue(3)
    assert core.inference.mode.concurrency == 2
    session, inference = core.chats, core.inference
    greedy = session.new_conversation(GenerationConfig(max_new_tokens=24))
    sampled = session.new_conversation(
        GenerationConfig(temperature=0.9, top_p=0.95, seed=7, max_new_tokens=24)
    )
    reference = session.new_conversation(GenerationConfig(max_new_tokens=24))
    with qtbot.waitSignal(session.reply_finished, timeout=TIMEOUT_MS):
        session.send(reference, "Once upon a time")
    active: set[int] = set()
    most = 0

    def started(request: int) -> None:
        nonlocal most
        active.add(request)
        most = max(most, len(active))

    def ended(request: int, *_: object) -> None:
        active.discard(request)

    inference.started.connect(started)
    inference.finished.connect(ended)
    finished: list[str] = []

    def reply_finished(conversation: str, _reason: str) -> None:
        finished.append(conversation)

    session.reply_finished.connect(reply_finished)
    try:
        assert session.send(greedy, "Once upon a time")
        assert session.send(sampled, "Once upon a time")
        qtbot.waitUntil(lambda: {greedy, sampled} <= set(finished), timeout=TIMEOUT_MS)
    finally:
        inference.started.disconnect(started)
        inference.finished.disconnect(ended)
        session.reply_finished.disconnect(reply_finished)
    assert most == 2, "the two replies should generate at the same time"
    text = {cid: session.get(cid).messages[-1].text for cid in (greedy, sampled, reference)}
    assert text[greedy] == text[reference] != ""
    assert text[sampled] != text[greedy]
    with qtbot.waitSignal(session.reply_finished, timeout=TIMEOUT_MS):
        session.regenerate(sampled)
    assert session.get(sampled).messages[-1].text == text[sampled]  # same seed, same text
    assert session.get(sampled).config.seed == 7


def test_fleet_rows_and_a_lost_worker(qtbot: QtBot, app: Any) -> None:
    core, window, _ = app
    info = WorkerInfo("den-pc", "192.168.1.20", 5555, "k" * 40, "0.1.0", 1, os="Linux",
                      ram_bytes=16_000_000_000, devices=("CPU", "GPU.0"))  # fmt: skip
    core.fleet.upsert(info, WorkerStatus.ONLINE)
    core.fleet.upsert(
        WorkerInfo("attic", "192.168.1.21", 5555, "j" * 40, "0.0.9", 0),
        WorkerStatus.WRONG_VERSION,
        "speaks protocol 0: install fleetgui 0.1.0 on it",
    )
    table = window.fleet_view.table.model()  # what the fleet view's table shows
    assert table.rowCount() == 3  # this PC first
    assert "coordinator" in table.index(0, 0).data()
    assert table.index(2, 1).data().startswith("wrong version: speaks protocol 0")
    core.fleet.mark_lost("den-pc", "no heartbeat for 6 s")
    assert table.index(1, 1).data() == "lost: no heartbeat for 6 s"
    assert "den-pc lost" in window.messages.label.text()
    window.fleet_view.address.setText("10.0.0.5:5555")
    window.fleet_view.add_requested.emit("10.0.0.5:5555")
    qtbot.waitUntil(lambda: "not available" in window.messages.label.text())


def test_export_can_be_cancelled_and_leaves_no_export(
    qtbot: QtBot, qloop: Any, tiny_exports_2s_draft: dict[str, Path], tmp_path: Path
) -> None:
    core, window = make_window(tmp_path)
    qtbot.addWidget(window)
    core.deployment.export_root = tmp_path / "exports"
    assert core.deployment.choose_model(tiny_exports_2s_draft["model"])
    with qtbot.waitSignal(core.deployment.cancelled, timeout=TIMEOUT_MS):
        window.deploy_view.export_button.click()
        window.deploy_view.cancel_button.click()
    qtbot.waitUntil(lambda: core.deployment.state.value == "idle", timeout=TIMEOUT_MS)
    exported = list((tmp_path / "exports").glob("*/manifest.json"))
    assert exported == []


@pytest.fixture
def heavy_calls(monkeypatch: pytest.MonkeyPatch) -> list[tuple[str, bool]]:
    """Records each blocking call (compiling or reading a model, synchronous inference,
    exporting, converting a stage, loading a tokenizer, planning) with whether it ran on the GUI
    thread."""
    import threading

    import openvino as ov

    import fleetgui.app.deploy.controller
    import fleetgui.export.exporter
    import fleetgui.export.stage_export
    import fleetgui.runtime.chat_prompt
    import fleetgui.runtime.tokenizer

    calls: list[tuple[str, bool]] = []

    def watch(owner: Any, name: str) -> None:
        original = getattr(owner, name)

        def recorded(*args: Any, **kwargs: Any) -> Any:
            gui = threading.current_thread() is threading.main_thread()
            calls.append((name, gui))
            return original(*args, **kwargs)

        monkeypatch.setattr(owner, name, recorded)

    watch(ov.Core, "compile_model")
    watch(ov.Core, "read_model")
    watch(ov.InferRequest, "infer")
    watch(fleetgui.export.exporter, "export_model")
    watch(fleetgui.export.exporter, "compress_weights")
    watch(fleetgui.export.stage_export, "convert_stage")
    watch(fleetgui.runtime.tokenizer.Tokenizer, "__init__")
    watch(fleetgui.runtime.chat_prompt.ChatPrompter, "__init__")  # probes the tokenizer
    watch(fleetgui.runtime.chat_prompt.ChatPrompter, "fit")  # renders, counts, trims
    watch(fleetgui.app.deploy.controller, "preview_plan")
    return calls


def test_deploying_a_model_folder_exports_it_in_the_plans_stages(
    qtbot: QtBot,
    qloop: Any,
    tiny_exports_2s_draft: dict[str, Path],
    tmp_path: Path,
    heavy_calls: list,
) -> None:
    """Deploy on an HF folder: planned layer by layer, exported with the plan's --layers, then
    the export's stages are placed as that plan and deployed (the view shows both plans). The
    GUI thread never plans, exports, compiles or runs a model itself: all of it, and a chat's
    reply, happens off it."""
    from fleetgui.export.manifest import read_manifest

    core, window = make_window(tmp_path)
    qtbot.addWidget(window)
    deployment = core.deployment
    deployment.export_root, deployment.export_weights = tmp_path / "exports", "fp32"
    plans: list[Any] = []
    deployment.plan_ready.connect(plans.append)
    assert deployment.choose_model(tiny_exports_2s_draft["model"])
    with qtbot.waitSignal(deployment.deployed, timeout=3 * TIMEOUT_MS):
        window.deploy_view.deploy_button.click()
    qtbot.waitUntil(lambda: deployment.state.value == "idle", timeout=TIMEOUT_MS)
    layered, placed = plans  # the model folder's plan, then its export's
    assert deployment.model_dir is not None and deployment.model_dir.parent == tmp_path / "exports"
    stages = [(s.start_layer, s.end_layer) for s in read_manifest(deployment.model_dir).stages]
    assert stages == [(s.shard.start_layer, s.shard.end_layer) for s in layered.stages]
    assert placed.same_layout(layered) and deployment.plan is placed
    assert window.deploy_view.plan_table.rowCount() == len(placed.stages)
    new_chat(window, max_new_tokens=8)
    assert send_and_wait(qtbot, window, "Once upon a time")
    names = {name for name, _ in heavy_calls}
    assert {"compile_model", "preview_plan", "__init__", "export_model", "convert_stage"} <= names
    assert "fit" in names  # the chat's prompt was fitted to the context, off the GUI thread
    on_gui_thread = [name for name, gui in heavy_calls if gui]
    assert on_gui_thread == [], f"blocking calls on the GUI thread: {on_gui_thread}"
    unload = asyncio.ensure_future(core.inference.unload())
    qtbot.waitUntil(unload.done, timeout=TIMEOUT_MS)


def test_screenshot_command_writes_every_view(
    tiny_exports_2s_draft: dict[str, Path], tmp_path: Path
) -> None:
    out = tmp_path / "shots"
    env = {**os.environ, "FLEETGUI_HOME": str(tmp_path / "home"), "QT_QPA_PLATFORM": "offscreen"}
    result = subprocess.run(
        [sys.executable, "-m", "fleetgui", "gui", str(tiny_exports_2s_draft["2s"]),
         "--screenshot", str(out), "--prompt", "Hello"],
        capture_output=True, text=True, env=env, timeout=300, check=False,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr[-2000:]
    for name in ("fleet", "deployment", "dashboard", "chat"):
        png = out / f"{name}.png"
        assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and png.stat().st_size > 5000
    assert not (tmp_path / "home" / "data" / "chats").exists()  # history stays out of the user's


def test_a_gguf_file_typed_in_the_model_field_is_opened_off_the_gui_thread_and_deployed(
    qtbot: QtBot, qloop: Any, tiny_models: Callable[..., Path], tmp_path: Path
) -> None:
    """The model picker takes a .gguf file: its view folder is made off the GUI thread, it
    becomes the chosen HuggingFace-kind model, and deploying it exports and answers."""
    import threading

    from gguf_support import write_llama_gguf

    import fleetgui.export.sources

    gguf = write_llama_gguf(tiny_models("llama"), tmp_path / "tiny.gguf")
    threads: list[bool] = []
    original = fleetgui.export.sources.resolve_model

    def recording(*args: Any, **kwargs: Any) -> Path:
        threads.append(threading.current_thread() is threading.main_thread())
        return original(*args, **kwargs)

    fleetgui.export.sources.resolve_model = recording  # type: ignore[assignment]
    try:
        core, window = make_window(tmp_path)
        qtbot.addWidget(window)
        deployment = core.deployment
        deployment.export_root, deployment.export_weights = tmp_path / "exports", "fp32"
        window.deploy_view.folder.setText(str(gguf))
        failures: list[str] = []
        deployment.failed.connect(failures.append)
        changed: list[tuple[str, ModelKind]] = []
        deployment.model_changed.connect(lambda folder, kind: changed.append((folder, kind)))
        window.deploy_view.choose_requested.emit(str(gguf))
        qtbot.waitUntil(lambda: bool(changed or failures), timeout=TIMEOUT_MS)
        assert failures == []
        ((folder, kind),) = changed
        assert kind is ModelKind.HUGGINGFACE
        assert (Path(folder) / "gguf_view.json").is_file()
        assert threads == [False]
        qtbot.waitUntil(lambda: deployment.state.value == "idle", timeout=TIMEOUT_MS)
        with qtbot.waitSignal(deployment.deployed, timeout=3 * TIMEOUT_MS):
            window.deploy_view.deploy_button.click()
        new_chat(window, max_new_tokens=8)
        assert send_and_wait(qtbot, window, "Once upon a time")
    finally:
        fleetgui.export.sources.resolve_model = original


def test_the_context_panel_sets_what_is_planned_and_deployed_and_is_kept(
    qtbot: QtBot, qloop: Any, tiny_exports_2s_draft: dict[str, Path], tmp_path: Path
) -> None:
    """Context, conversation keeping and the KV budget, edited in the deployment tab: the plan
    preview says what the context costs, the deployed pipeline has that context and budget,
    and a new window shows the values kept."""
    core, window = make_window(tmp_path)
    qtbot.addWidget(window)
    panel = window.deploy_view.context_panel
    panel.context.setValue(96)
    panel.kv_budget.setValue(1)
    panel.context.editingFinished.emit()
    deploy(qtbot, core, window, tiny_exports_2s_draft["2s"])
    text = window.deploy_view.layout_info.text()
    assert "Context: 96 tokens a stream" in text
    assert "per 1,000 tokens" in window.deploy_view.layout_info.text()
    # continuous batching: how many users' KV each PC holds at this context, and so share a pass
    shown = re.search(r"up to \(([^)]*)\) streams at this context, so up to (\d+) share", text)
    assert shown is not None, text
    per_pc = [int(n.rsplit(" ", 1)[1]) for n in shown.group(1).split(", ")]
    assert min(per_pc) == int(shown.group(2)) > 0
    pipeline: Any = core.inference.pipeline
    assert pipeline.context_limit == 96
    one_mb = pipeline.resident.budget_entries
    panel.kv_reuse.setChecked(False)  # emits at once
    deploy(qtbot, core, window, tiny_exports_2s_draft["2s"])
    assert core.inference.pipeline.resident is None  # type: ignore[union-attr]
    assert not panel.kv_budget.isEnabled()
    panel.kv_reuse.setChecked(True)
    panel.kv_budget.setValue(0)
    panel.kv_budget.editingFinished.emit()
    deploy(qtbot, core, window, tiny_exports_2s_draft["2s"])
    assert core.inference.pipeline.resident.budget_entries > one_mb  # type: ignore[union-attr]
    unload = asyncio.ensure_future(core.inference.unload())
    qtbot.waitUntil(unload.done, timeout=TIMEOUT_MS)

    panel.context.setValue(128)
    panel.kv_budget.setValue(64)
    panel.kv_budget.editingFinished.emit()
    again, window_again = make_window(tmp_path)
    qtbot.addWidget(window_again)
    shown = window_again.deploy_view.context_panel
    assert (shown.context.value(), shown.kv_reuse.isChecked(), shown.kv_budget.value()) == (
        128,
        True,
        64,
    )
    assert (again.deployment.context, again.deployment.kv_budget) == (128, 64 << 20)


def test_context_flags_apply_to_this_run_only(qloop: Any, tmp_path: Path) -> None:
    """``fleetgui gui --context 96 --kv-budget 300KB``: the deployment uses them (the budget
    in whole MB, rounded up) and the saved settings stay as they were."""
    import argparse

    from fleetgui.commands import gui

    parser = argparse.ArgumentParser()
    gui.add_arguments(parser)
    core, window = make_window(tmp_path)
    gui.apply_start_context(core, parser.parse_args(["--context", "96", "--kv-budget", "300KB"]))
    assert (core.deployment.context, core.deployment.kv_reuse) == (96, True)
    assert core.deployment.kv_budget == 1 << 20
    assert window.deploy_view.context_panel.context.value() == 96
    gui.apply_start_context(core, parser.parse_args(["--no-kv-reuse"]))
    assert (core.deployment.context, core.deployment.kv_reuse) == (96, False)
    saved = core.settings.values
    assert (saved.context, saved.kv_reuse, saved.kv_budget_mb) == (0, True, 0)
    window.close()
