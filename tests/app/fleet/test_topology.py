"""The fleet as a picture: the model of it (:mod:`fleetgui.app.fleet.topology`, made by
:mod:`fleetgui.app.fleet.topology_tracker`) on plain data, then the real window against a real
2-worker fleet on loopback: every PC is drawn with its layer range, the hops with their measured
time, the busy stages while a reply generates, and when a worker is killed mid-reply the picture
marks it lost and shows its layers on the PC that took them."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("PySide6")
pytest.importorskip("qasync")

from app_support import TIMEOUT_MS, QtBot, drive, new_chat, send_and_wait
from fleet_support import WorkerProcess
from PySide6.QtCore import Qt
from PySide6.QtWidgets import QGraphicsSimpleTextItem

from fleetgui.app.core import AppCore
from fleetgui.app.deploy.fleet import FleetDeployer
from fleetgui.app.deploy.interfaces import DeployRequest
from fleetgui.app.fleet.controller import FleetController
from fleetgui.app.fleet.topology import (
    HIDDEN,
    TOKENS,
    FleetLayout,
    LinkFacts,
    Move,
    Node,
    RingSpec,
    Role,
    Topology,
    kv_text,
    layers_text,
    stage_span,
)
from fleetgui.app.fleet.topology_tracker import TopologyTracker, hop_shares
from fleetgui.app.fleet.worker_status import WorkerRow, WorkerStatus
from fleetgui.app.fleet.worker_table import WorkerTableModel
from fleetgui.app.views.fleet_view import FleetView
from fleetgui.app.views.main_window import MainWindow
from fleetgui.app.views.topology_view import TopologyView
from fleetgui.fleet.placement.preview import export_stages
from fleetgui.fleet.profiling.this_pc import coordinator_name
from fleetgui.net.worker_info import WorkerInfo
from fleetgui.runtime.kv_budget import KvHeld
from fleetgui.runtime.metrics import StageTiming, TransferTiming
from fleetgui.shard import Shard


def layers(start: int, end: int) -> Shard:
    """Layers ``[start, end)`` of the 8-layer model the picture's tests deploy."""
    return Shard("tiny@test", start, end, 8)


STAGES = (layers(0, 3), layers(3, 6), layers(6, 8))


def row(
    name: str, status: WorkerStatus = WorkerStatus.ONLINE, coordinator: bool = False
) -> WorkerRow:
    info = WorkerInfo(
        name, "10.0.0.1", 0 if coordinator else 5555, "k", "0.1", 1,
        ram_bytes=16_000_000_000, free_ram_bytes=8_000_000_000, devices=("CPU",),
    )  # fmt: skip
    reason = "no heartbeat" if status is WorkerStatus.LOST else ""
    return WorkerRow(info, status, reason, 1.0, coordinator)


def layout(
    *members: tuple[str, tuple[int, ...]], lost: tuple[str, ...] = (), **kw: Any
) -> FleetLayout:
    return FleetLayout(1, "here", STAGES, (10**8,) * 3, (RingSpec((0,), members),), lost=lost, **kw)


# -- the model ----------------------------------------------------------------------------------


def test_the_ring_with_layers_hops_and_the_busy_stage() -> None:
    tracker = TopologyTracker(busy_window_s=1.0)
    tracker.set_rows([row("here", coordinator=True), row("a"), row("b"), row("idle")])
    links = (LinkFacts("a", 1.0, 7 * 10**9), LinkFacts("b", 1.0, 6 * 10**9))
    tracker.set_layout(layout(("a", (1,)), ("b", (2,)), spares=("idle",), links=links))
    for i in range(10):  # stage 1 computes 60 ms of every 100 ms
        tracker.record(StageTiming(1, 0, 10.0, 1), 5.0 + i * 0.1)
        tracker.record(StageTiming(1, 1, 60.0, 1), 5.0 + i * 0.1)
        tracker.record(TransferTiming(1, 0, 3.0, 4096), 5.0 + i * 0.1)
    picture = tracker.topology(now=5.95)
    assert [(n.name, n.role, n.layers) for n in picture.nodes] == [
        ("here", Role.COORDINATOR, layers(0, 3)),
        ("a", Role.WORKER, layers(3, 6)),
        ("b", Role.WORKER, layers(6, 8)),
        ("idle", Role.SPARE, None),
    ]
    a = picture.node("a")
    assert a is not None and a.layers_text == "layers 3–5" and a.busy == pytest.approx(0.6)
    assert a.free_bytes == 7 * 10**9 and a.stage_bytes == 10**8  # the heartbeat's, not the probe's
    assert picture.generating
    assert [(e.source, e.target, e.carries) for e in picture.edges] == [
        ("here", "a", HIDDEN), ("a", "b", HIDDEN), ("b", "here", TOKENS),
    ]  # fmt: skip
    assert sum(e.ms or 0 for e in picture.edges) == pytest.approx(3.0)  # the ring's transfer
    assert picture.edges[0].bytes_per_pass == 4096 and picture.edges[2].bytes_per_pass is None
    assert picture.edges[0].bytes_per_s == pytest.approx(4096 / (1e-3 * 3.0 / 3))
    later = tracker.topology(now=8.0)
    assert not later.generating and all(n.busy == 0 for n in later.nodes)


def test_hops_to_a_slow_link_take_the_larger_share() -> None:
    path = ["here", "a", "b", "here"]
    assert hop_shares(path, {}, "here") == pytest.approx([1 / 3] * 3)
    assert hop_shares(path, {"a": 1.0, "b": 1.0}, "here") == pytest.approx([1 / 3] * 3)
    slow = hop_shares(path, {"a": 1.0, "b": 10.0}, "here")
    assert slow[0] < slow[1] and slow[1] == pytest.approx(slow[2]) and sum(slow) == pytest.approx(1)


def test_a_failover_marks_the_lost_pc_and_shows_where_its_layers_went() -> None:
    tracker = TopologyTracker()
    tracker.set_rows([row("here", coordinator=True), row("a"), row("b")])
    tracker.set_layout(layout(("a", (1,)), ("b", (2,))))
    tracker.set_rows([row("here", coordinator=True), row("a"), row("b", WorkerStatus.LOST)])
    rebuilding = tracker.topology(now=0.0)  # lost, the ring not rebuilt yet
    b = rebuilding.node("b")
    assert b is not None and b.role is Role.LOST and b.layers == layers(6, 8)
    tracker.set_layout(layout(("a", (1, 2)), lost=("b",)))
    picture = tracker.topology(now=0.0)
    move = Move("b", "a", (2,), layers(6, 8))
    assert picture.moves == (move,)
    a, b = picture.node("a"), picture.node("b")
    assert a is not None and a.layers == layers(3, 8) and a.took == (move,)
    assert (
        b is not None and b.role is Role.LOST and b.gave == (move,) and b.status.startswith("lost")
    )
    assert move.text == "layers 6–7: b → a"
    # a stage moved to this PC; a new deployment forgets the moves
    everything_here = RingSpec((0, 1, 2), ())
    tracker.set_layout(
        FleetLayout(1, "here", STAGES, (0,) * 3, (everything_here,), lost=("b", "a"))
    )
    assert Move("a", "here", (1, 2), layers(3, 8)) in tracker.topology(now=0.0).moves
    tracker.set_layout(
        FleetLayout(2, "here", STAGES, (0, 0, 0), (RingSpec((0,), (("a", (1, 2)),)),))
    )
    assert tracker.topology(now=0.0).moves == ()


def test_whole_copies_are_a_ring_each_through_this_pc() -> None:
    tracker = TopologyTracker()
    tracker.set_rows([row("here", coordinator=True), row("a"), row("b")])
    copy = (0, 1, 2)
    rings = (RingSpec((), (("a", copy),)), RingSpec((), (("b", copy),)))
    tracker.set_layout(FleetLayout(1, "here", STAGES, (10**8,) * 3, rings))
    picture = tracker.topology(now=0.0)
    assert [(n.name, n.layers_text) for n in picture.nodes] == [
        ("here", "no layers"), ("a", "layers 0–7"), ("b", "layers 0–7"),
    ]  # fmt: skip
    assert [(e.source, e.target, e.carries) for e in picture.edges] == [
        ("here", "a", TOKENS), ("a", "here", TOKENS), ("here", "b", TOKENS), ("b", "here", TOKENS),
    ]  # fmt: skip


def test_each_pc_shows_the_kv_its_stages_hold_and_what_idle_chats_may_keep() -> None:
    tracker = TopologyTracker()
    tracker.set_rows([row("here", coordinator=True), row("a"), row("b")])
    per_token = (100, 200, 50)  # one token's KV in each stage's layers
    held = KvHeld(tokens=1_000, idle_tokens=600, budget_tokens=4_000)
    ring = RingSpec((0,), (("a", (1, 2)),), held)
    tracker.set_layout(
        FleetLayout(1, "here", STAGES, (10**8,) * 3, (ring,), kv_token_bytes=per_token)
    )
    picture = tracker.topology(now=0.0)
    here, a, b = picture.node("here"), picture.node("a"), picture.node("b")
    assert here is not None and (here.kv_bytes, here.kv_budget_bytes) == (100_000, 400_000)
    assert a is not None and (a.kv_bytes, a.kv_budget_bytes) == (250_000, 1_000_000)
    assert b is not None and b.kv_bytes is None  # a spare holds none
    assert "KV 250.0 KB (chats kept up to 1.0 MB)" in a.memory_text
    assert kv_text(picture, "here") == (
        "KV in use: this PC 100.0 KB · a 250.0 KB (idle chats kept up to 1.0 MB a PC)"
    )
    # whole copies: each ring's KV is its own PC's; no budget known says no limit
    copies = (
        RingSpec((), (("a", (0, 1, 2)),), KvHeld(10, 0, None)),
        RingSpec((), (("b", (0, 1, 2)),), KvHeld(20, 0, None)),
    )
    tracker.set_layout(FleetLayout(2, "here", STAGES, (0,) * 3, copies, kv_token_bytes=per_token))
    picture = tracker.topology(now=0.0)
    assert [(n.name, n.kv_bytes) for n in picture.nodes] == [
        ("here", None), ("a", 3_500), ("b", 7_000),
    ]  # fmt: skip
    assert kv_text(picture, "here") == "KV in use: a 3.5 KB · b 7.0 KB"
    tracker.set_layout(None)
    assert kv_text(tracker.topology(now=0.0), "here") == ""


def test_nothing_deployed_shows_the_known_pcs() -> None:
    tracker = TopologyTracker()
    tracker.set_rows([row("here", coordinator=True), row("a"), row("gone", WorkerStatus.LOST)])
    picture = tracker.topology(now=0.0)
    assert [(n.name, n.role) for n in picture.nodes] == [
        ("here", Role.COORDINATOR), ("a", Role.IDLE), ("gone", Role.LOST),
    ]  # fmt: skip
    assert picture.edges == () and "nothing deployed" in picture.note


def test_a_click_on_a_pc_in_the_picture_selects_it_for_pairing(qtbot: QtBot) -> None:
    rows = [row("here", coordinator=True), row("a"), row("newpc", WorkerStatus.NOT_PAIRED)]
    model = WorkerTableModel()
    view = FleetView(model)
    qtbot.addWidget(view)
    view.resize(1000, 700)
    view.show()
    for each in rows:
        model.put(each)
    tracker = TopologyTracker()
    tracker.set_rows(rows)
    view.show_topology(tracker.topology(now=0.0))
    picture = view.picture
    box = next(i for i in picture.scene().items() if i.data(0) == "newpc")
    point = picture.mapFromScene(box.sceneBoundingRect().center())
    qtbot.mouseClick(picture.viewport(), Qt.MouseButton.LeftButton, pos=point)
    assert model.index(view.table.currentIndex().row(), 0).data() == "newpc"


def test_every_text_in_a_pcs_box_stays_inside_its_border(qtbot: QtBot) -> None:
    """Long names and memory lines are elided to the box (issue 39: they ran over its right
    border); the box's tooltip has them whole."""
    long_name = "workstation-in-the-server-room-upstairs-" + "x" * 20
    view = TopologyView()
    qtbot.addWidget(view)
    view.resize(1000, 700)
    view.show()
    node = Node(
        long_name, Role.WORKER, "online", layers=layers(0, 8), device="CPU, GPU.0, NPU",
        stage_bytes=3 * 10**9, free_bytes=23 * 10**9, total_bytes=25 * 10**9,
        kv_bytes=42_500, kv_budget_bytes=5_800_000_000,
    )  # fmt: skip
    view.show_topology(Topology(nodes=(node,)))
    box = next(i for i in view.scene().items() if i.data(0) == long_name)
    border = box.sceneBoundingRect()
    texts = [i for i in box.childItems() if isinstance(i, QGraphicsSimpleTextItem)]
    assert len(texts) == 5
    for text in texts:
        assert border.contains(text.sceneBoundingRect()), (text.text(), border)
    assert texts[0].text().endswith("…") and long_name in box.toolTip()


# -- the real window on a real fleet ------------------------------------------------------------


def shown(window: MainWindow) -> Topology:
    return window.fleet_view.picture.topology


@pytest.mark.slow
def test_the_picture_shows_every_pc_with_its_layers_and_a_failover(
    qtbot: QtBot, fleet_app: tuple[AppCore, MainWindow, FleetController],
    tiny_export: Callable[..., Path], workers: dict[str, WorkerProcess],
) -> None:  # fmt: skip
    export_3s = tiny_export(3)
    core, window, controller = fleet_app
    qtbot.waitUntil(lambda: len(controller.usable_endpoints()) == 2, timeout=TIMEOUT_MS)
    here = coordinator_name()
    picture_view = window.fleet_view.picture
    assert window.fleet_view.views.currentWidget() is picture_view  # the picture comes first
    assert {n.name for n in shown(window).nodes} == {here, "w1", "w2"}  # known, not deployed
    # deployed as `fleetgui run --workers w1,w2` spreads it: stage 0 here, then one each (the
    # planner would rightly keep a model this small on fewer PCs)
    deployer = core.deployment.deployer
    assert isinstance(deployer, FleetDeployer)
    llm = drive(deployer.deploy(DeployRequest(export_3s), lambda _: None))
    drive(core.inference.install(llm, "exp-3s on the fleet"))
    assert deployer.session is not None
    assignment = deployer.session.deployment.assignment
    assert assignment is not None and [m.name for m in assignment.members] == ["w1", "w2"]

    # every PC of the ring, with the layers the deployment gave it, in ring order
    stages = export_stages(export_3s)
    holders = {here: assignment.local, **{m.name: m.indices for m in assignment.members}}
    expected = {name: layers_text(stage_span(stages, ix)) for name, ix in holders.items()}

    def drawn() -> dict[str, str]:
        return {n: picture_view.node_text(n).splitlines()[1] for n in expected}

    qtbot.waitUntil(lambda: drawn() == expected, timeout=TIMEOUT_MS)
    assert [(e.source, e.target) for e in shown(window).edges] == [
        (here, "w1"), ("w1", "w2"), ("w2", here),
    ]  # fmt: skip

    # a reply: the hops get measured times, the stages are seen busy; w2 is killed mid-reply
    busiest: dict[str, float] = {}

    def watch() -> None:
        for node in shown(window).nodes:
            busiest[node.name] = max(busiest.get(node.name, 0.0), node.busy)

    window.topology.updated.connect(watch)
    pieces = 0

    def kill_on_tenth_piece(_: str, __: str) -> None:
        nonlocal pieces
        pieces += 1
        if pieces == 10:
            workers["w2"].kill()

    core.chats.reply_delta.connect(kill_on_tenth_piece)
    try:
        new_chat(window, max_new_tokens=40)
        send_and_wait(qtbot, window, "Once upon a time")
    finally:
        core.chats.reply_delta.disconnect(kill_on_tenth_piece)
    assert pieces > 10, "the reply went on after the kill"
    assert deployer.session.failover.failovers == ["w2"]
    members = deployer.session.deployment.assignment.members
    taker = next((m.name for m in members if 2 in m.indices), here)
    moved = stages[2]

    def failover_drawn() -> bool:
        picture = shown(window)
        lost, took = picture.node("w2"), picture.node(taker)
        lost_box = picture_view.node_text("w2")
        return (
            lost is not None and lost.role is Role.LOST and took is not None
            and [(m.source, m.target, m.layers) for m in picture.moves] == [("w2", taker, moved)]
            and "LOST" in lost_box and layers_text(moved) in lost_box
            and "took w2's" in picture_view.node_text(taker)
        )  # fmt: skip

    qtbot.waitUntil(failover_drawn, timeout=TIMEOUT_MS)
    window.topology.updated.disconnect(watch)
    assert all(busiest[name] > 0 for name in (here, "w1")), busiest  # seen computing
    edges = shown(window).edges
    assert all(e.ms is not None and e.ms > 0 for e in edges), edges
    assert edges[0].bytes_per_pass and edges[0].bytes_per_s  # hidden states into the ring
    assert "w2" not in {e.source for e in edges} | {e.target for e in edges}  # out of the ring
    assert picture_view.grab().width() > 0
