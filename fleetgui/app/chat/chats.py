"""``Chats``: the conversations, their replies as they stream, and their history on disk.

Each conversation generates at most one reply at a time (its own stream); several conversations
can generate at once. Every change that matters is saved at once (the user's message before the
model starts, the reply when it ends) and the reply in progress every ``SAVE_EVERY_S`` seconds.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass, replace

from PySide6.QtCore import QObject, Signal

from fleetgui.app.chat.conversation import (
    ASSISTANT,
    DEFAULT_REPLY,
    USER,
    ChatMessage,
    Conversation,
    ReplyEnd,
    chat_messages,
    finished_message,
)
from fleetgui.app.chat.history import HistoryStore
from fleetgui.app.errors import user_message
from fleetgui.app.inference import InferenceService, ReplyFigures
from fleetgui.generation_config import GenerationConfig
from fleetgui.runtime.generation import GenerationResult

log = logging.getLogger(__name__)

SAVE_EVERY_S = 2.0  # a streaming reply is saved at least this often


@dataclass
class _Reply:
    conversation_id: str
    text: str = ""
    saved_at: float = 0.0
    # what writes the reply, taken when it starts (the mode may be changed while it streams)
    model: str = ""
    mode: str = ""


class Chats(QObject):
    """Several conversations, each streaming replies from the ``InferenceService``."""

    conversations_changed = Signal()  # added, removed or renamed
    messages_changed = Signal(str)  # conversation id: a message was added, replaced or removed
    reply_delta = Signal(str, str)  # conversation id, new text of the reply in progress
    reply_finished = Signal(str, str)  # conversation id, finish reason (eos, stop, ..., stopped)
    reply_failed = Signal(str, str)  # conversation id, message with the fix
    busy_changed = Signal(str, bool)  # conversation id, generating

    def __init__(
        self, inference: InferenceService, store: HistoryStore, parent: QObject | None = None
    ) -> None:
        super().__init__(parent)
        self.inference = inference
        self.store = store
        self._conversations: dict[str, Conversation] = {c.id: c for c in store.load_all()}
        self._replies: dict[int, _Reply] = {}  # request id -> reply in progress
        # what a new conversation starts with; the settings row shows (and edits) it while no
        # conversation is selected, so what the user sees there is what the next chat uses
        self.next_config = DEFAULT_REPLY
        inference.delta.connect(self._on_delta)
        inference.finished.connect(self._on_finished)
        inference.stopped.connect(self._on_stopped)
        inference.failed.connect(self._on_failed)
        log.info("%d conversation(s) restored from %s", len(self._conversations), store.folder)

    # -- reading ------------------------------------------------------------------------------

    def conversations(self) -> list[Conversation]:
        """Oldest first."""
        return list(self._conversations.values())

    def get(self, conversation_id: str) -> Conversation:
        return self._conversations[conversation_id]

    def is_busy(self, conversation_id: str) -> bool:
        return self._request_of(conversation_id) is not None

    def reply_in_progress(self, conversation_id: str) -> str | None:
        request = self._request_of(conversation_id)
        return None if request is None else self._replies[request].text

    def conversation_of(self, request: int) -> str | None:
        """The conversation reply request ``request`` answers (None: not a chat reply)."""
        reply = self._replies.get(request)
        return None if reply is None else reply.conversation_id

    def _request_of(self, conversation_id: str) -> int | None:
        return next(
            (rid for rid, r in self._replies.items() if r.conversation_id == conversation_id),
            None,
        )

    # -- changing -----------------------------------------------------------------------------

    def new_conversation(self, config: GenerationConfig | None = None) -> str:
        """A new empty conversation replying with ``config`` (default: ``next_config``); its
        id."""
        conversation = Conversation(config=config or self.next_config)
        self._conversations[conversation.id] = conversation
        self.store.save(conversation)
        self.conversations_changed.emit()
        return conversation.id

    def delete(self, conversation_id: str) -> None:
        self.stop(conversation_id)
        if self._conversations.pop(conversation_id, None) is not None:
            self.store.delete(conversation_id)
            self.conversations_changed.emit()

    def set_config(self, conversation_id: str, config: GenerationConfig) -> None:
        """Reply with ``config`` in this conversation from now on; raises ``ValueError``
        naming a bad value."""
        config.check()
        conversation = self.get(conversation_id)
        conversation.config = config
        self.store.save(conversation)

    def set_next_config(self, config: GenerationConfig) -> None:
        """Start new conversations with ``config``; raises ``ValueError``."""
        config.check()
        self.next_config = config

    def send(self, conversation_id: str, text: str) -> bool:
        """Add the user's message and start the reply. False (and ``reply_failed``) if the text
        is empty or a reply is still being written."""
        if not text.strip():
            return False
        if self.is_busy(conversation_id):
            self.reply_failed.emit(
                conversation_id, "a reply is still being written: wait or press Stop (Esc)"
            )
            return False
        conversation = self.get(conversation_id)
        renamed = conversation.title == "New chat"
        conversation.add(ChatMessage(USER, text.strip()))
        self.store.save(conversation)
        if renamed:
            self.conversations_changed.emit()
        self.messages_changed.emit(conversation_id)
        self._start(conversation)
        return True

    def regenerate(self, conversation_id: str) -> bool:
        """Replace the last reply with a new one (stopping it first if it is being written)."""
        conversation = self.get(conversation_id)
        if self.is_busy(conversation_id):
            self.stop(conversation_id)
            return False
        if conversation.messages and conversation.messages[-1].role == ASSISTANT:
            conversation.messages.pop()
        if not conversation.messages:
            return False
        self.store.save(conversation)
        self.messages_changed.emit(conversation_id)
        self._start(conversation)
        return True

    def stop(self, conversation_id: str) -> None:
        request = self._request_of(conversation_id)
        if request is not None:
            self.inference.stop(request)

    def stop_all(self) -> None:
        for request in list(self._replies):
            self.inference.stop(request)

    def _start(self, conversation: Conversation) -> None:
        # speculation is the app's mode, not the conversation's
        config = replace(conversation.config, k=self.inference.mode.draft_tokens)
        try:
            config.check()
        except ValueError as exc:
            self.reply_failed.emit(conversation.id, user_message(exc))
            return
        # rendered with the model's chat template (which adds the stop strings its format
        # needs), and fitted to its context, off this thread
        request = self.inference.submit_chat(chat_messages(conversation.messages), config)
        self._replies[request] = _Reply(
            conversation.id,
            saved_at=time.monotonic(),
            model=self.inference.description,
            mode=str(self.inference.mode),
        )
        self.busy_changed.emit(conversation.id, True)

    # -- replies ------------------------------------------------------------------------------

    def _on_delta(self, request: int, text: str) -> None:
        reply = self._replies.get(request)
        if reply is None:
            return
        reply.text += text
        self.reply_delta.emit(reply.conversation_id, text)
        now = time.monotonic()
        if now - reply.saved_at > SAVE_EVERY_S:
            reply.saved_at = now
            conversation = self.get(reply.conversation_id)
            draft = finished_message(
                reply.text, ReplyEnd.STOPPED, model=reply.model, mode=reply.mode
            )
            self.store.save(replace(conversation, messages=[*conversation.messages, draft]))

    def _end(self, request: int, message: ChatMessage | None, reason: str, error: str = "") -> None:
        reply = self._replies.pop(request, None)
        if reply is None:
            return
        conversation = self._conversations.get(reply.conversation_id)
        if conversation is None:  # deleted while generating
            return
        if message is not None:  # shown under the reply: what wrote it
            conversation.add(replace(message, model=reply.model, mode=reply.mode))
        self.store.save(conversation)
        self.messages_changed.emit(conversation.id)
        self.busy_changed.emit(conversation.id, False)
        if error:
            self.reply_failed.emit(conversation.id, error)
        else:
            self.reply_finished.emit(conversation.id, reason)

    def _on_finished(self, request: int, result: GenerationResult) -> None:
        message = finished_message(
            result.text,
            result.finish_reason,
            tokens=len(result.token_ids),
            ttft_ms=result.ttft_ms,
            tokens_per_s=result.tokens_per_s,
            cached_tokens=result.cached_tokens,
        )
        self._end(request, message, result.finish_reason)

    def _on_stopped(self, request: int, figures: ReplyFigures) -> None:
        reply = self._replies.get(request)
        text = reply.text if reply is not None else ""
        # the counts streamed so far, so a stopped reply's footer is as a finished one's
        message = (
            finished_message(
                text,
                ReplyEnd.STOPPED,
                tokens=figures.tokens,
                ttft_ms=figures.ttft_ms,
                tokens_per_s=figures.tokens_per_s,
            )
            if text
            else None
        )
        self._end(request, message, ReplyEnd.STOPPED)

    def _on_failed(self, request: int, error: str) -> None:
        reply = self._replies.get(request)
        text = reply.text if reply is not None else ""
        message = finished_message(text, ReplyEnd.FAILED) if text else None
        self._end(request, message, ReplyEnd.FAILED, error)
