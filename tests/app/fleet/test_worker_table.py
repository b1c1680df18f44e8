"""The fleet's worker table as a Qt item model (:mod:`fleetgui.app.fleet.worker_table`): rows in
order with the standard model signals naming the right rows, ``data()`` per role, checked throughout
by Qt's ``QAbstractItemModelTester``; and the fleet view showing it (long texts elided, whole in the
tooltip; pairing names the selected worker)."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import pytest
from clock_support import FakeClock

pytest.importorskip("PySide6")

from PySide6.QtCore import QModelIndex, Qt
from PySide6.QtGui import QColor
from PySide6.QtWidgets import QPushButton

from fleetgui.app.fleet.worker_status import WorkerStatus
from fleetgui.app.fleet.worker_table import COLUMNS, ROW_ROLE, STATUS_COLUMN, WorkerTableModel
from fleetgui.app.views.fleet_view import MAX_COLUMN_PX, FleetView
from fleetgui.net.worker_info import WorkerInfo

QtBot = Any  # pytest-qt's fixtures
DISPLAY, TOOLTIP = Qt.ItemDataRole.DisplayRole, Qt.ItemDataRole.ToolTipRole
LONG_REASON = (
    "refused a connection to port 2: start the worker with `fleetgui worker --listen "
    "0.0.0.0:5555` on that PC and let the port through its firewall"
)


def info(name: str, **kw: Any) -> WorkerInfo:
    return WorkerInfo(name, "192.168.1.20", 5555, "k" * 40, "0.1.0", 1, **kw)


class Recorder:
    """The model's standard signals as ``(signal, first, last)``, and its domain signals."""

    def __init__(self, model: WorkerTableModel) -> None:
        self.model: list[tuple[str, int, int]] = []
        self.domain: list[tuple[str, ...]] = []
        model.rowsInserted.connect(lambda _, a, b: self.model.append(("inserted", a, b)))
        model.rowsRemoved.connect(lambda _, a, b: self.model.append(("removed", a, b)))
        model.rowsMoved.connect(lambda _, a, b, _p, to: self.model.append(("moved", a, to)))
        model.dataChanged.connect(self._changed)
        model.worker_added.connect(lambda n: self.domain.append(("added", n)))
        model.worker_changed.connect(lambda n: self.domain.append(("changed", n)))
        model.worker_removed.connect(lambda n: self.domain.append(("removed", n)))
        model.worker_lost.connect(lambda n, r: self.domain.append(("lost", n, r)))

    def _changed(self, top: QModelIndex, bottom: QModelIndex, _roles: object = None) -> None:
        whole_rows = (top.column(), bottom.column()) == (0, len(COLUMNS) - 1)
        self.model.append(("changed" if whole_rows else "changed cells", top.row(), bottom.row()))

    def take(self) -> tuple[list[tuple[str, int, int]], list[tuple[str, ...]]]:
        taken = (self.model, self.domain)
        self.model, self.domain = [], []
        return taken


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


@pytest.fixture
def checked(qtmodeltester: Any, clock: FakeClock) -> WorkerTableModel:
    """A model watched by Qt's ``QAbstractItemModelTester`` (pytest-qt's ``qtmodeltester``):
    any inconsistency it reports while a test changes the model fails that test."""
    model = WorkerTableModel(clock=clock)
    qtmodeltester.check(model)
    return model


def test_rows_come_and_go_with_signals_naming_them(checked: WorkerTableModel) -> None:
    model, seen = checked, Recorder(checked)
    model.upsert(info("a"), WorkerStatus.ONLINE)
    model.set_coordinator(info("here"))  # known later, shown first all the same
    model.upsert(info("b"), WorkerStatus.NOT_PAIRED, "pair it")
    assert model.names() == ["here", "a", "b"] and model.rowCount() == 3
    assert seen.take() == (
        [("inserted", 0, 0), ("inserted", 0, 0), ("inserted", 2, 2)],
        [("added", "a"), ("added", "here"), ("added", "b")],
    )
    model.upsert(info("a", busy=True), WorkerStatus.ONLINE)
    assert seen.take() == ([("changed", 1, 1)], [("changed", "a")])
    assert model.get("a") == model.row_at(1) and model.row_at(1).status is WorkerStatus.BUSY
    model.mark_lost("b", "no heartbeat for 6 s")
    assert seen.take() == (
        [("changed", 2, 2)],
        [("changed", "b"), ("lost", "b", "no heartbeat for 6 s")],
    )
    model.mark_lost("here", "never")  # this PC is never lost
    model.mark_lost("nobody", "never")
    assert seen.take() == ([], [])
    model.remove("a")
    assert seen.take() == ([("removed", 1, 1)], [("removed", "a")])
    model.upsert(info("a"), WorkerStatus.ONLINE)  # seen again: listed last, as a new worker
    assert model.names() == ["here", "b", "a"]
    assert seen.take() == ([("inserted", 2, 2)], [("added", "a")])
    # a row that becomes the coordinator moves up (Qt counts the destination before the move)
    model.put(replace(model.row_at(2), coordinator=True))
    assert model.names() == ["here", "a", "b"]
    assert seen.take() == ([("moved", 2, 1), ("changed", 1, 1)], [("changed", "a")])
    assert [model.row_of(n) for n in ("here", "a", "b", "nobody")] == [0, 1, 2, None]


def test_data_by_role(checked: WorkerTableModel) -> None:
    model = checked
    model.set_coordinator(
        info("here", os="Linux", cpu="Ryzen 7", cpu_cores=16, ram_bytes=32_000_000_000,
             free_ram_bytes=8_000_000_000, devices=("CPU", "GPU.0"))
    )  # fmt: skip
    model.upsert(info("den-pc", cpu="i5"), WorkerStatus.PORT_CLOSED, LONG_REASON)

    def texts(row: int, role: Qt.ItemDataRole = DISPLAY) -> list[Any]:
        return [model.index(row, c).data(role) for c in range(model.columnCount())]

    assert texts(0) == [
        "here (coordinator)", "online", "Linux", "Ryzen 7 (16 threads)",
        "8.0 of 32.0 GB free", "CPU, GPU.0", "this PC", "—",
    ]  # fmt: skip
    assert texts(1) == [
        "den-pc", f"port closed: {LONG_REASON}", "", "i5", "?", "?", "just now",
        "192.168.1.20:5555",
    ]  # fmt: skip
    assert texts(1, TOOLTIP) == texts(1)  # the whole text of a cell the view may elide
    assert (
        model.index(1, 0).data(ROW_ROLE) == model.index(1, 5).data(ROW_ROLE) == model.get("den-pc")
    )
    status = STATUS_COLUMN
    assert isinstance(model.index(1, status).data(Qt.ItemDataRole.ForegroundRole), QColor)
    assert model.index(0, status).data(Qt.ItemDataRole.ForegroundRole) is None  # usable
    assert model.index(1, 0).data(Qt.ItemDataRole.ForegroundRole) is None
    assert model.index(5, 0).data() is None and model.index(5, 0).data(ROW_ROLE) is None
    header = [model.headerData(c, Qt.Orientation.Horizontal) for c in range(len(COLUMNS))]
    assert header == list(COLUMNS) and COLUMNS[status] == "Status"
    assert model.summary() == "2 PC(s) known, 1 usable"


def test_refresh_updates_last_seen_in_every_row(
    checked: WorkerTableModel, clock: FakeClock
) -> None:
    model = checked
    model.set_coordinator(info("here"))
    model.upsert(info("a"), WorkerStatus.ONLINE)
    model.upsert(info("b"), WorkerStatus.NOT_ANSWERING, "no answer", seen=False)
    last_seen = COLUMNS.index("Last seen")
    seen = Recorder(model)
    clock.now += 90
    model.refresh()
    assert seen.take() == ([("changed", 0, 2)], [])  # the view redraws; nothing else changed
    assert [model.index(r, last_seen).data() for r in range(3)] == ["this PC", "90 s ago", "never"]


def test_the_view_elides_long_texts_and_pairs_the_selected_worker(qtbot: QtBot) -> None:
    model = WorkerTableModel()
    view = FleetView(model)
    qtbot.addWidget(view)
    view.resize(1280, 700)
    view.show()
    view.views.setCurrentWidget(view.table)
    model.set_coordinator(info("here", cpu="AMD Ryzen 9 7950X 16-Core Processor", cpu_cores=32))
    model.upsert(info("den-pc"), WorkerStatus.PORT_CLOSED, LONG_REASON)
    model.upsert(info("newpc"), WorkerStatus.NOT_PAIRED, "pair it")
    assert view.summary.text() == "3 PC(s) known, 1 usable"
    header = view.table.horizontalHeader()

    def widths() -> list[int]:
        return [header.sectionSize(c) for c in range(len(COLUMNS))]

    # the status is capped (elided in its cell), so the columns after it stay in view
    qtbot.waitUntil(lambda: widths()[STATUS_COLUMN] == MAX_COLUMN_PX)
    assert sum(widths()) <= view.table.viewport().width(), widths()
    assert not view.table.horizontalScrollBar().isVisible()
    assert not view.table.wordWrap()
    assert view.table.textElideMode() == Qt.TextElideMode.ElideRight
    assert model.row_of("den-pc") == 1
    assert LONG_REASON in model.index(1, STATUS_COLUMN).data(TOOLTIP)
    asked: list[tuple[str, str]] = []
    view.pair_requested.connect(lambda name, code: asked.append((name, code)))
    pair = next(b for b in view.findChildren(QPushButton) if b.text() == "Pair selected")
    view.select("newpc")  # a click on its box in the picture
    view.code.setText(" 123-456 ")
    pair.click()
    view.select("here")  # the worker's name, not the cell's "here (coordinator)"
    pair.click()
    assert asked == [("newpc", "123-456"), ("here", "123-456")]
