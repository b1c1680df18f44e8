"""The benchmark's prompts: chat requests that ask for long answers, and prompts of a length.

The requests mix code, explanation and rewriting, as a chat model's users send; each is sent
as a user message in the model's own chat template when the export has one. The n-gram drafter
pays on text that repeats the prompt or itself, so its acceptance (and PP+SD's speedup) depends
on this mix: the report gives the acceptance beside every speculative figure.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

from fleetgui.runtime.chat_prompt import ChatPrompter

REQUESTS: tuple[str, ...] = (
    "Write a Python function that checks whether a number is prime, with a docstring and a "
    "few tests.",
    "Explain in a few paragraphs how a bicycle stays upright.",
    "Write a Python class for a stack with push, pop and peek methods, and show how to use it.",
    "Give me a detailed plan for a three-day trip to Rome.",
    "Rewrite this sentence in five different ways: The quick brown fox jumps over the lazy dog.",
    "Write a Python function that merges two sorted lists into one sorted list, and explain "
    "how it works.",
)

#: Text that prompts of a given length are cut from (any text does: only the length matters).
FILLER = (
    "The committee met on a rainy Tuesday to review the plans for the new library. The "
    "architect showed drawings of a reading room with tall windows facing the river, a "
    "children's corner with low shelves, and a quiet floor for study. Several members asked "
    "about the cost of heating such a large space in winter, and the architect explained how "
    "the thick walls and the heat pump would keep the bills low. "
)


class TextTokenizer(Protocol):
    """What prompts need of a tokenizer."""

    def encode(self, text: str) -> list[int]: ...

    def decode(self, ids: list[int]) -> str: ...


def request_texts(prompter: ChatPrompter | None) -> list[str]:
    """:data:`REQUESTS` as prompts: user messages in the chat template, or as they are when the
    export has none (``prompter`` None or a fallback)."""
    if prompter is None or prompter.is_fallback:
        return list(REQUESTS)
    return [prompter.text([{"role": "user", "content": r}]) for r in REQUESTS]


def pick(prompts: Sequence[str], repeat: int, count: int) -> list[str]:
    """``count`` prompts for a run in repeat ``repeat``: each repeat starts one further on, so
    every configuration of a repeat sees the same first prompt (figures pair by repeat)."""
    return [prompts[(repeat + i) % len(prompts)] for i in range(count)]


def prompt_of_length(tokenizer: TextTokenizer, n_tokens: int) -> str:
    """A text the tokenizer encodes to about ``n_tokens`` tokens (cut from :data:`FILLER`; the
    run reports the exact count)."""
    if n_tokens < 1:
        raise ValueError(f"a prompt needs at least 1 token, not {n_tokens}")
    text = FILLER
    while len(tokenizer.encode(text)) < n_tokens + 8:
        text += FILLER
    ids = tokenizer.encode(text)[:n_tokens]
    return tokenizer.decode(ids)
