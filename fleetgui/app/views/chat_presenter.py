"""``ChatPresenter``: the chat tab's wiring to the :class:`~fleetgui.app.chat.chats.Chats`.

It is not a widget: it connects the chat view's requests to the chats, shows their
changes in the view, and keeps which conversation the tab shows. It is a child of the main
window, so Qt drops its connections to the chats when the window goes.
"""

from __future__ import annotations

import logging
from collections.abc import Callable

from PySide6.QtCore import QObject

from fleetgui.app.chat.chats import Chats
from fleetgui.app.views.chat_view import ChatView
from fleetgui.app.views.message_bar import MessageBar
from fleetgui.generation_config import GenerationConfig

log = logging.getLogger(__name__)


class ChatPresenter(QObject):
    """The chat view and the chats, kept in step; ``current_conversation`` is the one shown."""

    def __init__(self, chats: Chats, view: ChatView, messages: MessageBar, parent: QObject) -> None:
        super().__init__(parent)
        self.chats = chats
        self.view = view
        self.messages = messages
        self.current_conversation: str | None = None
        view.new_requested.connect(self._new_conversation)
        view.delete_requested.connect(lambda: self._on_shown(chats.delete))
        view.selected.connect(self.select_conversation)
        view.send_requested.connect(self._send)
        view.stop_requested.connect(lambda: self._on_shown(chats.stop))
        view.regenerate_requested.connect(lambda: self._on_shown(chats.regenerate))
        view.config_changed.connect(self._set_config)
        chats.conversations_changed.connect(self.refresh_conversations)
        chats.messages_changed.connect(self._on_messages_changed)
        chats.reply_delta.connect(view.append_delta)
        chats.busy_changed.connect(self._on_busy)
        chats.reply_failed.connect(lambda _, message: self.messages.show_error(message))

    def show_initial_state(self) -> None:
        """The last conversation, when there is one."""
        conversations = self.chats.conversations()
        self.current_conversation = conversations[-1].id if conversations else None
        self.refresh_conversations()
        if self.current_conversation is not None:
            self.select_conversation(self.current_conversation)

    def _new_conversation(self) -> None:
        self.current_conversation = self.chats.new_conversation()
        self.refresh_conversations()
        self.select_conversation(self.current_conversation)
        self.view.input.setFocus()

    def select_conversation(self, conversation_id: str) -> None:
        chats = self.chats
        self.current_conversation = conversation_id
        self.view.show_conversation(
            chats.get(conversation_id), chats.reply_in_progress(conversation_id)
        )

    def refresh_conversations(self) -> None:
        """The list of conversations again; the one shown stays, or the last one is shown."""
        chats = self.chats
        items = [(c.id, c.title) for c in chats.conversations()]
        if self.current_conversation not in {i for i, _ in items}:
            self.current_conversation = items[-1][0] if items else None
        self.view.set_conversations(items, self.current_conversation)
        if self.current_conversation is None:
            self.view.show_conversation(None, None, chats.next_config)
        elif self.view.current_id != self.current_conversation:
            self.select_conversation(self.current_conversation)

    def _on_shown(self, action: Callable[[str], object]) -> None:
        """``action`` on the conversation shown, if there is one."""
        if self.current_conversation is not None:
            action(self.current_conversation)

    def _send(self, text: str) -> None:
        if self.current_conversation is None:  # none shown: the message starts a new one
            self._new_conversation()
        if self.chats.send(self.current_conversation or "", text):
            self.view.clear_input()

    def _set_config(self, config: GenerationConfig) -> None:
        conversation_id = self.current_conversation
        try:
            if conversation_id:  # none shown: the next conversation's settings
                self.chats.set_config(conversation_id, config)
            else:
                self.chats.set_next_config(config)
        except ValueError as exc:
            self.messages.show_error(str(exc))

    def _on_messages_changed(self, conversation_id: str) -> None:
        if conversation_id == self.current_conversation:
            self.select_conversation(conversation_id)

    def _on_busy(self, conversation_id: str, busy: bool) -> None:
        if conversation_id == self.current_conversation:
            self.select_conversation(conversation_id)
