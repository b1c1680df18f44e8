"""The fleet as a picture: the ring's PCs as boxes around a circle in ring order (this PC at the
top), each hop an arrow labelled with its time and bandwidth; spares, idle and lost PCs below,
a lost PC's layers drawn moving to the PC that took them. Draws a
:class:`~fleetgui.app.fleet.topology.Topology`; nothing is computed here."""

from __future__ import annotations

import logging
import math

from PySide6.QtCore import QPointF, QRectF, Qt, Signal
from PySide6.QtGui import (
    QBrush,
    QColor,
    QFont,
    QFontMetricsF,
    QMouseEvent,
    QPainter,
    QPainterPath,
    QPen,
    QPolygonF,
    QResizeEvent,
)
from PySide6.QtWidgets import (
    QGraphicsPathItem,
    QGraphicsRectItem,
    QGraphicsScene,
    QGraphicsSimpleTextItem,
    QGraphicsView,
    QWidget,
)

from fleetgui.app.fleet.topology import Edge, Node, Role, Topology
from fleetgui.app.theme import colors

log = logging.getLogger(__name__)

NODE_W, NODE_H = 230.0, 104.0
RADIUS = 230.0  # of the ring's circle, for three or more PCs
ROW_GAP = 70.0  # between the ring and the row of PCs outside it
PAD = 10.0
TEXT_INSET = 8.0  # between a box's border and its text
ROLE_TEXT = {
    Role.COORDINATOR: "this PC (coordinator)",
    Role.WORKER: "worker",
    Role.SPARE: "spare",
    Role.LOST: "LOST",
    Role.IDLE: "not in the deployment",
}


def ring_positions(count: int) -> list[QPointF]:
    """Box centres for ``count`` ring PCs, clockwise from the top."""
    if count == 1:
        return [QPointF(0, 0)]
    if count == 2:
        return [QPointF(-RADIUS, 0), QPointF(RADIUS, 0)]
    out = []
    for i in range(count):
        angle = -math.pi / 2 + 2 * math.pi * i / count
        out.append(QPointF(RADIUS * 1.25 * math.cos(angle), RADIUS * math.sin(angle)))
    return out


def _border_point(center: QPointF, toward: QPointF) -> QPointF:
    """Where the line from ``center`` to ``toward`` leaves a node box."""
    dx, dy = toward.x() - center.x(), toward.y() - center.y()
    if dx == 0 and dy == 0:
        return center
    scale = min(
        (NODE_W / 2 + 6) / abs(dx) if dx else math.inf,
        (NODE_H / 2 + 6) / abs(dy) if dy else math.inf,
    )
    return QPointF(center.x() + dx * scale, center.y() + dy * scale)


class TopologyView(QGraphicsView):
    """Shows a :class:`Topology`; ``node_text(name)`` is what a node's box says."""

    node_clicked = Signal(str)  # a PC's name

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setScene(QGraphicsScene(self))
        self.setRenderHint(QPainter.RenderHint.Antialiasing)
        self.setMinimumSize(320, 240)
        self.topology = Topology()
        self._texts: dict[str, str] = {}
        self._edge_texts: list[str] = []

    def node_text(self, name: str) -> str:
        """The text of ``name``'s box ("" if it is not shown)."""
        return self._texts.get(name, "")

    def edge_texts(self) -> list[str]:
        """Each drawn hop as ``"source → target: label"``."""
        return list(self._edge_texts)

    def show_topology(self, topology: Topology) -> None:
        self.topology = topology
        self._draw()

    def apply_theme(self) -> None:
        self._draw()

    # -- drawing ----------------------------------------------------------------------------

    def _draw(self) -> None:
        topology = self.topology
        palette = colors()
        scene = self.scene()
        scene.clear()
        self._texts, self._edge_texts = {}, []
        self.setBackgroundBrush(QColor(palette.background))
        ring_names = [topology.nodes[0].name] if topology.nodes else []
        for edge in topology.edges:
            for name in (edge.source, edge.target):
                if name not in ring_names:
                    ring_names.append(name)
        centres = dict(zip(ring_names, ring_positions(len(ring_names)), strict=True))
        others = [n for n in topology.nodes if n.name not in centres]
        bottom = max((p.y() for p in centres.values()), default=0.0) + NODE_H + ROW_GAP
        width = (NODE_W + 30) * len(others)
        for i, node in enumerate(others):
            centres[node.name] = QPointF(-width / 2 + (NODE_W + 30) * (i + 0.5), bottom)
        for edge in topology.edges:
            self._edge(scene, edge, centres)
        for move in topology.moves:
            if move.source in centres and move.target in centres:
                self._move_arrow(scene, centres[move.source], centres[move.target], move.text)
        for node in topology.nodes:
            self._node(scene, node, centres[node.name])
        header = topology.note or ("generating" if topology.generating else "idle")
        if topology.moves:
            header += " · failover: " + "; ".join(m.text for m in topology.moves)
        title = scene.addSimpleText(header)
        title.setBrush(QColor(palette.muted))
        rect = scene.itemsBoundingRect()
        title.setPos(rect.left(), rect.top() - 30)
        scene.setSceneRect(scene.itemsBoundingRect().adjusted(-PAD, -PAD, PAD, PAD))
        self._fit()

    def _fit(self) -> None:
        self.resetTransform()
        rect = self.sceneRect()
        view = self.viewport().rect()
        if rect.width() > view.width() or rect.height() > view.height():
            self.fitInView(rect, Qt.AspectRatioMode.KeepAspectRatio)

    def mousePressEvent(self, event: QMouseEvent) -> None:  # noqa: N802 (Qt's name)
        item = self.itemAt(event.position().toPoint())
        while item is not None and item.data(0) is None:
            item = item.parentItem()
        if item is not None:
            self.node_clicked.emit(str(item.data(0)))
        super().mousePressEvent(event)

    def resizeEvent(self, event: QResizeEvent) -> None:  # noqa: N802 (Qt's name)
        super().resizeEvent(event)
        self._fit()

    def _node(self, scene: QGraphicsScene, node: Node, centre: QPointF) -> None:
        palette = colors()
        lost = node.role is Role.LOST
        accent = QColor(palette.error if lost else palette.series[0])
        box = QGraphicsRectItem(QRectF(-NODE_W / 2, -NODE_H / 2, NODE_W, NODE_H))
        box.setPos(centre)
        box.setBrush(QBrush(QColor(palette.code_background)))
        pen = QPen(accent if lost or node.busy > 0 else QColor(palette.code_border))
        pen.setWidthF(1.5 + 3.0 * node.busy)  # the busier, the bolder
        if lost or node.role in (Role.SPARE, Role.IDLE):
            pen.setStyle(Qt.PenStyle.DashLine)
        box.setPen(pen)
        scene.addItem(box)
        layers = node.layers_text
        if node.took:
            layers += " (took " + ", ".join(f"{m.source}'s" for m in node.took) + ")"
        if lost and node.gave:
            layers = "moved: " + "; ".join(m.text for m in node.gave)
        lines = [
            f"{node.name} — {ROLE_TEXT[node.role]}",
            layers,
            f"device {node.device}",
            node.memory_text,
            f"busy {node.busy:.0%}"
            if node.role in (Role.COORDINATOR, Role.WORKER)
            else node.status,
        ]
        self._texts[node.name] = "\n".join(lines)
        y = -NODE_H / 2 + 6
        for i, line in enumerate(lines):
            text = QGraphicsSimpleTextItem(box)
            font = QFont(text.font())
            font.setBold(i == 0)
            text.setFont(font)
            # elided to the box's inner width in this font (a count of characters let wide
            # texts and bold titles run over the border); the tooltip has them whole
            text.setText(_elide(line, font, NODE_W - 2 * TEXT_INSET))
            text.setBrush(QColor(palette.error if lost and i in (0, 4) else palette.foreground))
            text.setPos(-NODE_W / 2 + TEXT_INSET, y)
            y += 18
        if node.busy > 0 and not lost:
            bar = QGraphicsRectItem(QRectF(-NODE_W / 2, NODE_H / 2 - 5, NODE_W * node.busy, 5), box)
            bar.setBrush(QBrush(accent))
            bar.setPen(QPen(Qt.PenStyle.NoPen))
        box.setToolTip(self._texts[node.name])
        box.setData(0, node.name)  # what a click selects

    def _edge(self, scene: QGraphicsScene, edge: Edge, centres: dict[str, QPointF]) -> None:
        palette = colors()
        start, end = centres[edge.source], centres[edge.target]
        if start == end:
            return
        # a hop and its way back (two PCs) bow apart so both stay visible
        mid = (start + end) / 2
        normal = QPointF(-(end.y() - start.y()), end.x() - start.x())
        length = math.hypot(normal.x(), normal.y()) or 1.0
        control = mid + normal * (60.0 / length)
        a, b = _border_point(start, control), _border_point(end, control)
        path = QPainterPath(a)
        path.quadTo(control, b)
        item = QGraphicsPathItem(path)
        pen = QPen(QColor(palette.muted))
        pen.setWidthF(1.5)
        item.setPen(pen)
        scene.addItem(item)
        _arrow_head(scene, control, b, QColor(palette.muted))
        label = f"{edge.label}\n{edge.what}" if edge.label else edge.what
        _label(scene, label, path.pointAtPercent(0.5), QColor(palette.foreground))
        self._edge_texts.append(f"{edge.source} → {edge.target}: {edge.label or edge.what}")

    def _move_arrow(
        self, scene: QGraphicsScene, source: QPointF, target: QPointF, what: str
    ) -> None:
        palette = colors()
        a, b = _border_point(source, target), _border_point(target, source)
        pen = QPen(QColor(palette.error))
        pen.setStyle(Qt.PenStyle.DashLine)
        pen.setWidthF(2.0)
        scene.addLine(a.x(), a.y(), b.x(), b.y(), pen)
        _arrow_head(scene, a, b, QColor(palette.error))
        _label(scene, what, (a + b) / 2, QColor(palette.error))


def _arrow_head(scene: QGraphicsScene, before: QPointF, tip: QPointF, color: QColor) -> None:
    angle = math.atan2(tip.y() - before.y(), tip.x() - before.x())
    size = 10.0
    left = QPointF(tip.x() - size * math.cos(angle - 0.4), tip.y() - size * math.sin(angle - 0.4))
    right = QPointF(tip.x() - size * math.cos(angle + 0.4), tip.y() - size * math.sin(angle + 0.4))
    scene.addPolygon(QPolygonF([tip, left, right]), QPen(color), QBrush(color))


def _label(scene: QGraphicsScene, text: str, centre: QPointF, color: QColor) -> None:
    """``text`` centred on ``centre``, on the background colour (lines under it stay legible)."""
    item = QGraphicsSimpleTextItem(text)
    item.setBrush(color)
    rect = item.boundingRect().adjusted(-3, -1, 3, 1)
    back = scene.addRect(rect, QPen(Qt.PenStyle.NoPen), QBrush(QColor(colors().background)))
    back.setPos(centre.x() - rect.width() / 2, centre.y() - rect.height() / 2)
    item.setParentItem(back)


def _elide(text: str, font: QFont, width: float) -> str:
    """``text`` cut with "…" to fit ``width`` pixels in ``font``."""
    return QFontMetricsF(font).elidedText(text, Qt.TextElideMode.ElideRight, width)
