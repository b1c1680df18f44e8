"""Conversations as plain data: messages, each conversation's ``GenerationConfig`` (how its
replies are sampled, and how long they may be), JSON form, and the messages a conversation gives
the model's chat template. No Qt here."""

from __future__ import annotations

import enum
import logging
import time
import uuid
from dataclasses import asdict, dataclass, field, replace
from typing import Any

from fleetgui.errors import FleetguiError
from fleetgui.generation_config import GenerationConfig

log = logging.getLogger(__name__)

FORMAT_VERSION = 1  # of a saved conversation file
USER = "user"
ASSISTANT = "assistant"
ROLES = (USER, ASSISTANT)
TITLE_CHARS = 48  # a new conversation is titled with the start of its first message


class ReplyEnd(enum.StrEnum):
    """How a reply ended that the pipeline did not finish (else its ``FinishReason``)."""

    STOPPED = "stopped"  # the user stopped it
    FAILED = "failed"


class ConversationFormatError(FleetguiError):
    """A saved conversation file cannot be read."""


#: A new conversation's replies: greedy (the same question gives the same answer), 256 tokens.
#: Speculation (``k``) is not the conversation's: the app's mode sets it for each reply.
DEFAULT_REPLY = GenerationConfig(max_new_tokens=256)
#: What a saved conversation keeps of its configuration (the JSON object "sampling").
SAVED_FIELDS = ("temperature", "top_k", "top_p", "seed", "max_new_tokens")


def config_to_dict(config: GenerationConfig) -> dict[str, Any]:
    return {name: getattr(config, name) for name in SAVED_FIELDS}


def config_from_dict(data: dict[str, Any]) -> GenerationConfig:
    """A saved configuration; missing fields take :data:`DEFAULT_REPLY`'s values."""
    defaults = DEFAULT_REPLY
    seed = data.get("seed")
    return replace(
        defaults,
        temperature=float(data.get("temperature", defaults.temperature)),
        top_k=int(data.get("top_k", defaults.top_k)),
        top_p=float(data.get("top_p", defaults.top_p)),
        seed=int(seed) if isinstance(seed, int) else None,
        max_new_tokens=int(data.get("max_new_tokens", defaults.max_new_tokens)),
    )


@dataclass(frozen=True)
class ChatMessage:
    """One turn. An assistant message carries how its generation ended and its figures."""

    role: str  # "user" or "assistant"
    text: str
    created: float = field(default_factory=time.time)  # seconds since the epoch
    finish_reason: str = ""  # assistant: a FinishReason or ReplyEnd value, as saved
    tokens: int = 0  # assistant: tokens generated
    ttft_ms: float = 0.0  # assistant: time to the first token
    tokens_per_s: float = 0.0  # assistant: decode rate
    cached_tokens: int = 0  # assistant: prompt tokens whose KV the fleet kept from before
    model: str = ""  # assistant: what served it ("" when unknown, as in older files)
    mode: str = ""  # assistant: the decoding mode ("PP+SD, K auto")

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> ChatMessage:
        role = data.get("role")
        if role not in ROLES or not isinstance(data.get("text"), str):
            raise ConversationFormatError(f"a message has no valid role and text: {data!r:.80}")
        return cls(
            role=str(role),
            text=str(data["text"]),
            created=float(data.get("created", 0.0)),
            finish_reason=str(data.get("finish_reason", "")),
            tokens=int(data.get("tokens", 0)),
            ttft_ms=float(data.get("ttft_ms", 0.0)),
            tokens_per_s=float(data.get("tokens_per_s", 0.0)),
            cached_tokens=int(data.get("cached_tokens", 0)),
            model=str(data.get("model", "")),
            mode=str(data.get("mode", "")),
        )


@dataclass
class Conversation:
    """A chat: its messages in order and how its replies are generated."""

    id: str = field(default_factory=lambda: uuid.uuid4().hex[:12])
    title: str = "New chat"
    messages: list[ChatMessage] = field(default_factory=list)
    config: GenerationConfig = DEFAULT_REPLY
    created: float = field(default_factory=time.time)
    updated: float = field(default_factory=time.time)

    def add(self, message: ChatMessage) -> int:
        """Append ``message``; returns its index. The first user message names the chat."""
        self.messages.append(message)
        self.updated = time.time()
        if message.role == USER and self.title == "New chat":
            first_line = message.text.strip().splitlines()[0] if message.text.strip() else ""
            self.title = first_line[:TITLE_CHARS] or "New chat"
        return len(self.messages) - 1

    def to_dict(self) -> dict[str, Any]:
        return {
            "format": FORMAT_VERSION,
            "id": self.id,
            "title": self.title,
            "created": self.created,
            "updated": self.updated,
            "sampling": config_to_dict(self.config),
            "messages": [asdict(m) for m in self.messages],
        }

    @classmethod
    def from_dict(cls, data: Any) -> Conversation:
        if not isinstance(data, dict) or not isinstance(data.get("id"), str):
            raise ConversationFormatError("not a saved conversation (no id)")
        if data.get("format", FORMAT_VERSION) > FORMAT_VERSION:
            raise ConversationFormatError(
                f"conversation {data['id']} was saved by a newer fleetgui; update fleetgui"
            )
        messages = data.get("messages", [])
        if not isinstance(messages, list):
            raise ConversationFormatError(f"conversation {data['id']}: messages is not a list")
        sampling = data.get("sampling", {})
        return cls(
            id=data["id"],
            title=str(data.get("title", "New chat")),
            messages=[ChatMessage.from_dict(m) for m in messages if isinstance(m, dict)],
            config=config_from_dict(sampling if isinstance(sampling, dict) else {}),
            created=float(data.get("created", 0.0)),
            updated=float(data.get("updated", 0.0)),
        )


def finished_message(text: str, reason: str, **figures: Any) -> ChatMessage:
    """An assistant message as its generation ended."""
    return replace(ChatMessage(ASSISTANT, text), finish_reason=reason, **figures)


def chat_messages(messages: list[ChatMessage]) -> list[dict[str, str]]:
    """The turns as the chat template takes them (``{"role", "content"}``), empty ones left out
    (a reply stopped before its first token)."""
    return [{"role": m.role, "content": m.text.strip()} for m in messages if m.text.strip()]
