"""Chat history on disk: one JSON file per conversation in ``data_dir()/chats``, each written
atomically (the old or the new file, never half), so a crash loses at most the reply being typed."""

from __future__ import annotations

import json
import logging
from pathlib import Path

from fleetgui.app.chat.conversation import Conversation, ConversationFormatError
from fleetgui.fsutil import atomic_write_text
from fleetgui.paths import data_dir

log = logging.getLogger(__name__)

SUFFIX = ".json"


def default_history_dir() -> Path:
    return data_dir() / "chats"


class HistoryStore:
    """Saves and loads conversations in one folder."""

    def __init__(self, folder: Path | None = None) -> None:
        self.folder = Path(folder) if folder is not None else default_history_dir()

    def path_of(self, conversation_id: str) -> Path:
        if not conversation_id.isalnum():
            raise ValueError(f"invalid conversation id {conversation_id!r}")
        return self.folder / f"{conversation_id}{SUFFIX}"

    def save(self, conversation: Conversation) -> None:
        text = json.dumps(conversation.to_dict(), ensure_ascii=False, indent=1)
        atomic_write_text(self.path_of(conversation.id), text)

    def delete(self, conversation_id: str) -> None:
        self.path_of(conversation_id).unlink(missing_ok=True)

    def load_all(self) -> list[Conversation]:
        """Every readable conversation, oldest first; unreadable files are logged and skipped
        (never deleted: the user may want them back)."""
        if not self.folder.is_dir():
            return []
        conversations = []
        for path in sorted(self.folder.glob(f"*{SUFFIX}")):
            try:
                conversations.append(
                    Conversation.from_dict(json.loads(path.read_text(encoding="utf-8")))
                )
            except (OSError, ValueError, ConversationFormatError) as exc:
                log.warning("skipping chat history file %s: %s", path, exc)
        conversations.sort(key=lambda c: (c.created, c.id))
        return conversations
