"""Chat: conversation list, the conversation with its reply streaming in, sampling settings,
send (Ctrl+Enter), stop (Esc), regenerate, copy (each reply's Copy link; the button copies the
selection, else the last reply)."""

from __future__ import annotations

import logging

from PySide6.QtCore import Qt, QTimer, QUrl, Signal
from PySide6.QtGui import QGuiApplication, QKeySequence, QShortcut
from PySide6.QtWidgets import (
    QDoubleSpinBox,
    QHBoxLayout,
    QLabel,
    QListWidget,
    QListWidgetItem,
    QPlainTextEdit,
    QPushButton,
    QSpinBox,
    QSplitter,
    QVBoxLayout,
    QWidget,
)

from fleetgui.app.chat.chat_format import copied_reply, reply_to_copy
from fleetgui.app.chat.conversation import DEFAULT_REPLY, Conversation
from fleetgui.app.theme import colors
from fleetgui.app.views.transcript import Transcript
from fleetgui.generation_config import GenerationConfig

log = logging.getLogger(__name__)

RENDER_INTERVAL_MS = 50  # streamed text is redrawn at most this often
ID_ROLE = Qt.ItemDataRole.UserRole


class ChatView(QWidget):
    """The chat tab's widgets. Its requests are about the conversation shown: the
    :class:`~fleetgui.app.views.chat_presenter.ChatPresenter` knows which one that is."""

    new_requested = Signal()
    delete_requested = Signal()
    selected = Signal(str)  # conversation id
    send_requested = Signal(str)  # text
    stop_requested = Signal()
    regenerate_requested = Signal()
    config_changed = Signal(object)  # GenerationConfig: the settings row, edited

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.conversation: Conversation | None = None
        self.reply: str | None = None  # reply in progress of the shown conversation
        # list
        self.list = QListWidget()
        self.list.currentItemChanged.connect(self._on_current)
        new = QPushButton("New chat")
        new.clicked.connect(self.new_requested.emit)
        delete = QPushButton("Delete")
        delete.clicked.connect(self.delete_requested.emit)
        list_buttons = QHBoxLayout()
        list_buttons.addWidget(new)
        list_buttons.addWidget(delete)
        left = QWidget()
        left_layout = QVBoxLayout(left)
        left_layout.setContentsMargins(0, 0, 0, 0)
        left_layout.addWidget(self.list, 1)
        left_layout.addLayout(list_buttons)
        self.transcript = Transcript()
        self.transcript.anchorClicked.connect(self._on_link)
        self.format_note = QLabel()  # how the model is prompted, when the user should know
        self.format_note.setWordWrap(True)
        self.format_note.hide()
        self.hold_note = QLabel()  # why replies wait (the dashboard's benchmark runs)
        self.hold_note.setWordWrap(True)
        self.hold_note.hide()
        right = QWidget()
        right_layout = QVBoxLayout(right)
        right_layout.setContentsMargins(0, 0, 0, 0)
        right_layout.addWidget(self.format_note)
        right_layout.addWidget(self.hold_note)
        right_layout.addWidget(self.transcript, 1)
        right_layout.addLayout(self._build_sampling())
        right_layout.addLayout(self._build_input())
        splitter = QSplitter()
        splitter.addWidget(left)
        splitter.addWidget(right)
        splitter.setStretchFactor(1, 3)
        splitter.setSizes([220, 780])
        layout = QVBoxLayout(self)
        layout.addWidget(splitter)
        for keys in ("Ctrl+Return", "Ctrl+Enter"):
            QShortcut(QKeySequence(keys), self, self._send)
        QShortcut(QKeySequence(Qt.Key.Key_Escape), self, self.stop_requested.emit)
        self._render_timer = QTimer(self)
        self._render_timer.setSingleShot(True)
        self._render_timer.setInterval(RENDER_INTERVAL_MS)
        self._render_timer.timeout.connect(self.render_tick)
        self._updating = False
        self.show_config(DEFAULT_REPLY)  # not the spin boxes' minimums (top-p 0.01, ...)
        self.set_busy(False)

    def _build_sampling(self) -> QHBoxLayout:
        self.temperature = QDoubleSpinBox()
        self.temperature.setRange(0.0, 2.0)
        self.temperature.setSingleStep(0.1)
        self.temperature.setToolTip("0 is greedy: the same question gives the same answer")
        self.top_p = QDoubleSpinBox()
        self.top_p.setRange(0.01, 1.0)
        self.top_p.setSingleStep(0.05)
        self.top_k = QSpinBox()
        self.top_k.setRange(0, 1000)
        self.top_k.setSpecialValueText("off")
        self.max_tokens = QSpinBox()
        self.max_tokens.setRange(1, 8192)
        self.seed = QSpinBox()
        self.seed.setRange(-1, 2**31 - 1)
        self.seed.setSpecialValueText("random")
        sampling = QHBoxLayout()
        for label, widget in (
            ("temperature", self.temperature),
            ("top-p", self.top_p),
            ("top-k", self.top_k),
            ("max tokens", self.max_tokens),
            ("seed", self.seed),
        ):
            sampling.addWidget(QLabel(label))
            sampling.addWidget(widget)
            signal = getattr(widget, "valueChanged")  # noqa: B009
            signal.connect(self._sampling_changed)
        sampling.addStretch(1)
        return sampling

    def _build_input(self) -> QVBoxLayout:
        self.input = QPlainTextEdit()
        self.input.setPlaceholderText("Message (Ctrl+Enter sends, Esc stops)")
        self.input.setMaximumHeight(110)
        self.send_button = QPushButton("Send")
        self.send_button.setToolTip("Ctrl+Enter")
        self.send_button.clicked.connect(self._send)
        self.stop_button = QPushButton("Stop")
        self.stop_button.setToolTip("Esc")
        self.stop_button.clicked.connect(self.stop_requested.emit)
        self.regenerate_button = QPushButton("Regenerate")
        self.regenerate_button.clicked.connect(self.regenerate_requested.emit)
        self.copy_button = QPushButton("Copy reply")
        self.copy_button.clicked.connect(self.copy_reply)
        self.state = QLabel()
        buttons = QHBoxLayout()
        for widget in (self.send_button, self.stop_button, self.regenerate_button):
            buttons.addWidget(widget)
        buttons.addWidget(self.copy_button)
        buttons.addWidget(self.state, 1)
        column = QVBoxLayout()
        column.addWidget(self.input)
        column.addLayout(buttons)
        return column

    # -- user actions -------------------------------------------------------------------------

    @property
    def current_id(self) -> str | None:
        return self.conversation.id if self.conversation is not None else None

    def _on_current(self, item: QListWidgetItem | None) -> None:
        if item is not None and not self._updating:
            self.selected.emit(str(item.data(ID_ROLE)))

    def _send(self) -> None:
        text = self.input.toPlainText()
        if text.strip():
            self.send_requested.emit(text)

    def copy_reply(self) -> None:
        """Copy the selected text, or else the last reply (its markdown), to the clipboard."""
        cursor = self.transcript.textCursor()
        # the selection's plain text: selectedText() would have U+2029 where lines break
        text = cursor.selection().toPlainText() if cursor.hasSelection() else ""
        if not text and self.conversation is not None:
            text = reply_to_copy(self.conversation.messages, self.reply)
        if text:
            QGuiApplication.clipboard().setText(text)

    def _on_link(self, url: QUrl) -> None:
        """A reply's Copy link: copy that reply's text."""
        messages = self.conversation.messages if self.conversation is not None else []
        text = copied_reply(url.toString(), messages)
        if text is not None:
            QGuiApplication.clipboard().setText(text)

    def _sampling_changed(self) -> None:
        if self._updating:
            return
        seed = self.seed.value()
        config = GenerationConfig(
            temperature=round(self.temperature.value(), 3),
            top_k=self.top_k.value(),
            top_p=round(self.top_p.value(), 3),
            seed=None if seed < 0 else seed,
            max_new_tokens=self.max_tokens.value(),
        )
        self.config_changed.emit(config)

    # -- slots --------------------------------------------------------------------------------

    def set_conversations(self, items: list[tuple[str, str]], current: str | None) -> None:
        """Show ``(id, title)`` items, newest first, with ``current`` selected."""
        self._updating = True
        try:
            self.list.clear()
            for conversation_id, title in reversed(items):
                item = QListWidgetItem(title)
                item.setData(ID_ROLE, conversation_id)
                self.list.addItem(item)
                if conversation_id == current:
                    self.list.setCurrentItem(item)
        finally:
            self._updating = False

    def show_conversation(
        self,
        conversation: Conversation | None,
        reply: str | None,
        defaults: GenerationConfig | None = None,
    ) -> None:
        """Show ``conversation`` (its reply in progress, its settings); with none, the settings
        row shows ``defaults``: what the next conversation will use."""
        self.conversation = conversation
        self.reply = reply
        if conversation is not None:
            self.show_config(conversation.config)
        else:
            self.show_config(defaults or DEFAULT_REPLY)
        self.set_busy(reply is not None)
        self.refresh_transcript()

    def show_config(self, s: GenerationConfig) -> None:
        """Put ``s`` in the settings row (not a user's change: nothing is emitted)."""
        self._updating = True
        try:
            self.temperature.setValue(s.temperature)
            self.top_p.setValue(s.top_p)
            self.top_k.setValue(s.top_k)
            self.max_tokens.setValue(s.max_new_tokens)
            self.seed.setValue(-1 if s.seed is None else s.seed)
        finally:
            self._updating = False

    def append_delta(self, conversation_id: str, text: str) -> None:
        if conversation_id != self.current_id:
            return
        self.reply = (self.reply or "") + text
        if not self._render_timer.isActive():
            self._render_timer.start()

    def clear_input(self) -> None:
        self.input.clear()

    def set_format_note(self, note: str) -> None:
        """Show ``note`` above the chat (e.g. that the model has no chat template); '' hides it."""
        self.format_note.setText(note)
        self.format_note.setVisible(bool(note))

    def set_hold_note(self, note: str) -> None:
        """Say why replies wait ('' hides it)."""
        self.hold_note.setText(note)
        self.hold_note.setVisible(bool(note))

    def set_busy(self, busy: bool) -> None:
        self.stop_button.setEnabled(busy)
        self.send_button.setEnabled(not busy)
        self.state.setText("writing…" if busy else "")

    def refresh_transcript(self) -> None:
        """Show the conversation; what is already shown of it is kept (see ``Transcript``)."""
        messages = self.conversation.messages if self.conversation is not None else []
        self.transcript.show_messages(self.current_id, messages, self.reply, colors())

    def render_tick(self) -> None:
        """A render tick: only the growing reply is re-rendered (what changed of it)."""
        self._render_timer.stop()  # called directly: the tick the timer would make is done
        if self.reply is not None:
            self.transcript.update_reply(self.reply)
