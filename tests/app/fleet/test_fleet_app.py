"""The desktop app, offscreen, driving the real window against a real local fleet: worker
processes on loopback with CURVE on, tiny real models.

Add workers by address and see them online (an unpaired one says so with the fix, a closed port
says so), pair one with the code it shows, preview the plan and deploy with a progress bar per
worker: the fleet runs exactly the previewed plan (which PC has which layers, who is a spare),
chat and get the tokens an in-process run gives, switch to PP+SD with K 3 and redeploy, see the
charts (per-hop round trip included), and kill -9 a worker mid-reply: it is marked lost while the
reply completes with the same tokens (a spare takes its stage).

Previewing a plan measures the layer time of a stage of the export on this PC and on every
worker; the plan uses those measurements (each worker's equals what it reports) and the preview
does not call them estimates. Every PC here is the same machine, so their layer times are about
equal and the planner would rightly keep the whole tiny model on this PC; the app's device source
is wrapped to report this PC as far slower (:class:`SlowCoordinator`), as a measured slow
coordinator would be."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("PySide6")
pytest.importorskip("qasync")

from app_support import (
    TIMEOUT_MS,
    App,
    QtBot,
    drive,
    new_chat,
    reference_tokens,
    send_and_wait,
    show_preview,
    status_of,
)
from fleet_support import FAST_LINKS, WorkerProcess, worker_process
from PySide6.QtWidgets import QPushButton
from runtime_support import EXACT

from fleetgui.addresses import parse_address
from fleetgui.app.dashboard.metrics_series import (
    ACCEPTANCE,
    CHOSEN_K,
    HOP_MS,
    STAGE_MS,
    TOKENS_PER_S,
)
from fleetgui.fleet.placement.preview import export_stages, rows_of
from fleetgui.fleet.profiling.probe_stage import (
    WorkerProfile,
    choose_probe,
    profile_here,
    profile_worker,
)
from fleetgui.fleet.profiling.this_pc import coordinator_name
from fleetgui.fleet.ring.link import Dispatcher, WorkerLink
from fleetgui.modes import Mode
from fleetgui.net.info_probe import probe
from fleetgui.planner import Plan
from fleetgui.planner.fixed_stages import plan_rows
from fleetgui.worker.service import free_port_pair

pytestmark = pytest.mark.slow

TRUSTED = ("w1", "w2", "w3")


@dataclass
class PairingWorker(WorkerProcess):
    """A worker started with ``--pair`` that does not trust the coordinator yet; ``code`` is
    the one-time pairing code it prints."""

    code: str = ""

    def start(self) -> PairingWorker:
        super().start()
        said = [line for line in self.lines if line.startswith("pairing code for")]
        if not said:
            raise RuntimeError(f"worker {self.name} printed no pairing code: {self.lines}")
        self.code = said[-1].split(":", 1)[1].split()[0]
        return self


@pytest.fixture(scope="module")
def exports(tiny_export: Callable[..., Path]) -> dict[str, Path]:
    """The tiny Llama in 3 stages and a draft that nearly always agrees (noise 0.003)."""
    return {"3s": tiny_export(3), "draft": tiny_export(1, draft=0.003)}


@pytest.fixture(scope="module")
def workers(
    start_workers: Callable[..., list[WorkerProcess]], root: Path
) -> dict[str, WorkerProcess]:
    """w1, w2, w3 trust the coordinator; newpc shows a pairing code instead."""
    fresh = worker_process(root, "newpc", root / "newpc_authorized_keys", extra=["--pair"])
    newpc = PairingWorker(fresh.name, fresh.home, fresh.args)
    return {w.name: w for w in start_workers(*TRUSTED, newpc)}


@pytest.fixture(scope="module")
def closed_port() -> str:
    return f"127.0.0.1:{free_port_pair()}"  # nothing listens there


def preview_and_deploy(qtbot: QtBot, app: App, export_dir: Path) -> tuple[list[Any], Plan]:
    """Choose ``export_dir``, press Preview plan, then Deploy; returns the progress steps and
    the previewed plan."""
    steps: list[Any] = []
    deployment, view = app.core.deployment, app.window.deploy_view
    previewed = show_preview(qtbot, app, export_dir)
    deployment.deploy_progress.connect(steps.append)
    try:
        with qtbot.waitSignal(deployment.deployed, timeout=TIMEOUT_MS):
            view.deploy_button.click()
    finally:
        deployment.deploy_progress.disconnect(steps.append)
    qtbot.waitUntil(lambda: deployment.state.value == "idle", timeout=TIMEOUT_MS)
    return steps, previewed


def assert_deployed_as_previewed(app: App, export_dir: Path, preview: Plan) -> None:
    """The fleet runs exactly ``preview``: the same PCs with the same layers in the same ring
    order, the PCs it leaves out are the spares, and the view shows it."""
    session = app.deployer.session
    assert session is not None and session.deployment.assignment is not None
    assert app.core.deployment.plan is preview  # deployed as previewed, not planned again
    here = preview.devices[0]
    deployed = rows_of(session.deployment.assignment, export_stages(export_dir), here)
    assert deployed == plan_rows(preview)
    assert set(session.deployment.assignment.spares) == {x.device for x in preview.left_out}
    # ... and keeps re-planning from what the preview was made of (this PC first, ring order).
    assert session.replanning is not None
    context = session.replanning.replanner.context
    assert [d.name for d in context.devices][: len(preview.devices)] == list(preview.devices)
    assert context.stages == tuple(export_stages(export_dir))
    assert context.config.objective == preview.objective
    table = app.window.deploy_view.plan_table
    shown = [
        f"{table.item(r, 1).text()} {table.item(r, 2).text().split()[0]}"
        for r in range(table.rowCount())
    ]
    expected = [f"{s.device} {s.shard.start_layer}–{s.shard.end_layer - 1}" for s in preview.stages]
    assert shown == expected
    for left_out in preview.left_out:
        assert left_out.device in app.window.deploy_view.left_out.text()


def test_add_workers_by_address_and_see_why_one_is_not_usable(
    qtbot: QtBot, app: App, workers: dict[str, WorkerProcess], closed_port: str
) -> None:
    view, window = app.window.fleet_view, app.window
    for worker in workers.values():
        view.address.setText(worker.address)
        view.address.returnPressed.emit()
    for name in TRUSTED:
        qtbot.waitUntil(lambda n=name: status_of(window, n) == "online", timeout=TIMEOUT_MS)  # type: ignore[misc]
    qtbot.waitUntil(lambda: status_of(window, "newpc").startswith("not paired"))
    assert "fleetgui worker --pair" in status_of(window, "newpc")  # with the fix
    view.address.setText(closed_port)
    view.address.returnPressed.emit()
    qtbot.waitUntil(lambda: status_of(window, closed_port).startswith("port closed"))
    qtbot.waitUntil(lambda: "port closed" in window.messages.label.text())
    assert [e.name for e in app.controller.usable_endpoints()] == list(TRUSTED)
    profiles = app.core.deployment.devices.device_profiles()
    memory = {p.name: p.memory_bytes for p in profiles}
    # The link's round trip is a HELLO on the open encrypted link, not the probe's connecting.
    # measured, not a timeout (a loaded CI machine's loopback round trips exceed 50 ms)
    assert all(0 < p.rtt_ms < 500 for p in profiles[1:]), [(p.name, p.rtt_ms) for p in profiles]
    assert set(memory) >= set(TRUSTED) and all(v > 0 for v in memory.values())


def test_pair_a_worker_with_the_code_it_shows(
    qtbot: QtBot, app: App, workers: dict[str, WorkerProcess]
) -> None:
    view, window = app.window.fleet_view, app.window
    code = workers["newpc"].code  # type: ignore[attr-defined]
    assert code
    # its own setup (the first test adds it too; adding an address again is harmless)
    view.address.setText(workers["newpc"].address)
    view.address.returnPressed.emit()
    qtbot.waitUntil(lambda: status_of(window, "newpc").startswith("not paired"), timeout=TIMEOUT_MS)
    table = view.table
    model = table.model()
    row = next(r for r in range(model.rowCount()) if model.index(r, 0).data() == "newpc")
    table.selectRow(row)
    view.code.setText("wrong-code")
    pair = next(b for b in view.findChildren(QPushButton) if b.text() == "Pair selected")
    pair.click()
    qtbot.waitUntil(lambda: "wrong pairing code" in window.messages.label.text())
    qtbot.wait(600)  # the worker refuses attempts less than half a second apart
    view.code.setText(code)
    pair.click()
    qtbot.waitUntil(lambda: status_of(window, "newpc") == "online", timeout=15_000)
    assert workers["newpc"].info["public_key"] in app.controller.known.pinned(
        workers["newpc"].address, "newpc"
    )


def test_the_preview_uses_the_layer_times_the_pcs_measured(
    qtbot: QtBot, app: App, exports: dict[str, Path], workers: dict[str, WorkerProcess], root: Path
) -> None:
    qtbot.waitUntil(lambda: len(app.controller.usable_endpoints()) == len(workers))
    deployment, view = app.core.deployment, app.window.deploy_view
    steps: list[str] = []
    show_preview(qtbot, app, exports["3s"], steps)
    measured = deployment.layer_times
    assert measured is not None and dict(measured.estimated) == {}
    profiles = {p.name: p for p in measured.profiles}
    assert set(profiles) >= set(workers)
    assert steps[0].startswith("measuring layer times") and len(steps) == len(profiles) + 1
    probe = choose_probe(exports["3s"])

    async def ask(endpoint: Any) -> WorkerProfile:
        link = WorkerLink(*endpoint, app.controller.identity, Dispatcher(), config=FAST_LINKS)
        await link.open()
        try:
            return await profile_worker(link, probe)
        finally:
            await link.close()

    for endpoint in app.controller.usable_endpoints():
        reported = drive(ask((endpoint.name, endpoint.endpoint, endpoint.public_key)))
        assert reported.from_cache and reported.bytes_sent == 0  # measured for the preview
        assert profiles[endpoint.name].ms_per_layer == reported.device_profile().ms_per_layer
    here = profile_here(probe, EXACT.stage, timings_file=root / "app_home" / "probe_timings.json")
    assert here.from_cache
    here_ms = here.device_profile().ms_per_layer * 1000.0  # SlowCoordinator's factor
    assert measured.profiles[0].ms_per_layer == pytest.approx(here_ms)
    # the preview says the layer times are measured, on which PCs, and calls none an estimate
    text = view.layer_times.text()
    assert text.startswith("Layer times measured on") and all(n in text for n in profiles)
    assert "estimate" not in (text + view.plan_summary.text()).lower()


def test_cancel_during_deploy_leaves_nothing_loaded(
    qtbot: QtBot, app: App, exports: dict[str, Path], workers: dict[str, WorkerProcess]
) -> None:
    deployment, view = app.core.deployment, app.window.deploy_view
    qtbot.waitUntil(lambda: len(app.controller.usable_endpoints()) == len(workers))
    cancelled_at: list[Any] = []

    def cancel_at_first_worker_step(step: Any) -> None:
        if step.worker in workers and not cancelled_at:
            cancelled_at.append(step)
            view.cancel_button.click()

    view.choose_requested.emit(str(exports["3s"]))
    deployment.deploy_progress.connect(cancel_at_first_worker_step)
    try:
        with qtbot.waitSignal(deployment.cancelled, timeout=TIMEOUT_MS):
            view.deploy_button.click()
    finally:
        deployment.deploy_progress.disconnect(cancel_at_first_worker_step)
    qtbot.waitUntil(lambda: deployment.state.value == "idle", timeout=TIMEOUT_MS)
    assert cancelled_at and app.deployer.session is None and app.controller.sessions == ()
    assert app.core.inference.pipeline is None

    async def probe_all() -> list[Any]:
        return await asyncio.gather(*(probe(*parse_address(w.address)) for w in workers.values()))

    assert not any(info.busy for info in drive(probe_all()))  # every worker unloaded
    for name in workers:
        qtbot.waitUntil(lambda n=name: status_of(app.window, n) == "online")  # type: ignore[misc]


def test_deploy_on_the_fleet_and_the_reply_is_the_in_process_one(
    qtbot: QtBot, app: App, exports: dict[str, Path]
) -> None:
    qtbot.waitUntil(lambda: len(app.controller.usable_endpoints()) == 4)
    steps, preview = preview_and_deploy(qtbot, app, exports["3s"])
    assert_deployed_as_previewed(app, exports["3s"], preview)
    session = app.deployer.session
    assert session is not None and session.deployment.assignment is not None
    members = [m.name for m in session.deployment.assignment.members]
    # the slow coordinator keeps stage 0; the other stages go to the fleet, the rest are spares
    assignment = session.deployment.assignment
    assert assignment.local == (0,) and members and assignment.spares
    assert "on the fleet" in app.window.pipeline_state.text()
    bars = app.window.deploy_view.worker_bars
    for name in members:
        assert {s.step for s in steps if s.worker == name} >= {"loading the stages", "ready"}
        assert bars[name].value() == 1000  # its progress bar is full
        qtbot.waitUntil(lambda n=name: status_of(app.window, n).startswith("busy"))  # type: ignore[misc]
    assert "the fleet" in app.window.pipeline_state.text()

    conversation = new_chat(app.window, max_new_tokens=24)
    deltas = send_and_wait(qtbot, app.window, "def add(a, b):")
    _, options = app.requests[-1]
    prompt = app.results[-1].prompt  # the chat as rendered for the model
    result = app.results[-1]
    assert result.token_ids == reference_tokens(exports["3s"], prompt, options)
    assert "".join(deltas) == app.core.chats.get(conversation).messages[-1].text != ""
    # the conversation's KV stays on the ring: every PC with stages says what it holds
    held = app.core.inference.pipeline.kv_held()  # type: ignore[union-attr]
    assert held.idle_tokens == held.tokens
    assert result.prompt_tokens <= held.tokens <= result.prompt_tokens + len(result.token_ids)
    topology = app.window.topology.update_now()
    for name in [coordinator_name(), *members]:
        node = topology.node(name)
        assert node is not None and node.kv_bytes, name
        assert "KV" in node.memory_text
    assert all(n.kv_bytes is None for n in topology.nodes if n.name in assignment.spares)


def test_switch_to_pp_sd_with_k_redeploy_and_the_charts_follow(
    qtbot: QtBot, app: App, exports: dict[str, Path]
) -> None:
    panel, store = app.window.mode_panel, app.core.feed.store
    panel.draft.setText(str(exports["draft"]))
    panel.buttons[Mode.PP_SD].setChecked(True)
    panel.k_auto.setChecked(False)
    panel.k.setValue(3)
    assert "K 3" in app.window.mode_state.text()
    _, preview = preview_and_deploy(qtbot, app, exports["3s"])
    assert app.core.inference.has_draft
    assert_deployed_as_previewed(app, exports["3s"], preview)

    new_chat(app.window, max_new_tokens=24)
    send_and_wait(qtbot, app.window, "The old lighthouse keeper")
    _, options = app.requests[-1]
    prompt = app.results[-1].prompt  # the chat as rendered for the model
    assert options.speculative and options.k == 3
    result = app.results[-1]
    assert result.token_ids == reference_tokens(exports["3s"], prompt, options, exports["draft"])
    assert result.acceptance_rate is not None
    for chart in (STAGE_MS, TOKENS_PER_S, HOP_MS, ACCEPTANCE, CHOSEN_K):
        assert store.series(chart), chart.title
    assert max(store.series(CHOSEN_K)[0].y) <= 3
    hop = store.series(HOP_MS)[0]
    qtbot.waitUntil(lambda: len(app.window.dashboard.curves[("hop_ms", hop.name)].xData) > 0)


def test_kill_a_worker_mid_reply_marks_it_lost_and_the_reply_completes(
    qtbot: QtBot, app: App, workers: dict[str, WorkerProcess], exports: dict[str, Path]
) -> None:
    session = app.deployer.session
    assert session is not None and session.deployment.assignment is not None
    victim = session.deployment.assignment.members[-1].name
    pieces = 0

    def kill_on_second_piece(_: str, __: str) -> None:
        nonlocal pieces
        pieces += 1
        if pieces == 2:
            workers[victim].kill()

    app.core.chats.reply_delta.connect(kill_on_second_piece)
    try:
        new_chat(app.window, max_new_tokens=40)
        send_and_wait(qtbot, app.window, "Once upon a time")
    finally:
        app.core.chats.reply_delta.disconnect(kill_on_second_piece)
    assert pieces > 2, "the reply went on after the kill"
    _, options = app.requests[-1]
    prompt = app.results[-1].prompt  # the chat as rendered for the model
    reference = reference_tokens(exports["3s"], prompt, options, exports["draft"])
    assert app.results[-1].token_ids == reference
    assert session.failover.failovers == [victim]
    assert victim not in [m.name for m in session.deployment.assignment.members]
    qtbot.waitUntil(lambda: status_of(app.window, victim).startswith("lost"))
    assert f"worker {victim} lost" in app.window.messages.label.text().lower()
    qtbot.wait(1500)  # later probes (port closed now) keep it lost
    assert status_of(app.window, victim).startswith("lost")


def test_screenshot_command_renders_the_fleet_with_real_workers(
    workers: dict[str, WorkerProcess], exports: dict[str, Path], identity_dir: Path, tmp_path: Path
) -> None:
    alive = [w.address for w in workers.values() if w.process and w.process.poll() is None]
    out = tmp_path / "shots"
    env = {**os.environ, "FLEETGUI_HOME": str(tmp_path / "home"), "QT_QPA_PLATFORM": "offscreen"}
    command = [
        sys.executable, "-m", "fleetgui", "--log-level", "info", "gui", str(exports["3s"]),
        "--workers", ",".join(alive[:2]), "--identity", str(identity_dir),
        "--screenshot", str(out), "--prompt", "Hello",
    ]  # fmt: skip
    result = subprocess.run(
        command, capture_output=True, text=True, env=env, timeout=300, check=False
    )
    assert result.returncode == 0, result.stderr[-2000:]
    # deployed as the preview (with measured layer times) planned it
    assert "deployed exp-3s as planned: " in result.stderr, result.stderr[-2000:]
    for name in ("fleet", "deployment", "dashboard", "chat"):
        png = out / f"{name}.png"
        assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and png.stat().st_size > 5000
    assert not (tmp_path / "home" / "config" / "workers.json").exists()  # a scratch list
