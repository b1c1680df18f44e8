"""A conversation as a pipeline's prompt: rendered with the model's chat template, its oldest
turns dropped while it does not fit the context.

Fitting counts tokens once: each message's text is encoded once and its count cached, and the
template's own tokens (role headers, a default system prompt, the generation prompt) are
measured once per template from two small probe conversations. The prompt a fit chooses is then
encoded once to confirm it; only if the estimate was short (merges across a turn's edges) is
one more turn dropped and the prompt encoded again.
"""

from __future__ import annotations

import logging
import threading
from collections import OrderedDict
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from fleetgui.runtime.chat_template import ChatTemplate, ChatTemplateError, load_chat_template
from fleetgui.runtime.strict_roles import reshaped

if TYPE_CHECKING:
    from fleetgui.runtime.tokenizer import Tokenizer

log = logging.getLogger(__name__)

Encode = Callable[[str], list[int]]
Messages = Sequence[Mapping[str, Any]]

SYSTEM = "system"
USER = "user"
ASSISTANT = "assistant"
CACHE_SIZE = 4096  # messages whose token counts are kept
PROBE_TEXT = "Hi"
#: Tokens a message's role header costs when the template cannot be probed.
DEFAULT_PER_MESSAGE = 8


@dataclass(frozen=True)
class ChatPrompt:
    """The prompt text and how it was fitted."""

    text: str
    tokens: int  # as the pipeline's tokenizer encodes ``text``
    dropped: int  # messages left out, oldest first, to fit the context


def tokenizer_adds_bos(encode: Encode, bos_token: str | None) -> bool:
    """Whether ``encode`` puts ``bos_token`` in front of any text itself (Llama, Gemma and
    Mistral tokenizers do; ChatML ones do not): then "a" starts with its id, and BOS + "a"
    with that id twice (the added one, then the one written)."""
    if not bos_token:
        return False
    plain, marked = encode("a"), encode(bos_token + "a")
    return bool(plain) and len(marked) >= 2 and plain[0] == marked[0] == marked[1]


def open_final_message(rendered: str, final: str) -> str:
    """``rendered`` (a conversation rendered without a generation prompt) cut just after its
    final message's text, so that the model goes on writing that message. The template may
    trim the text's spaces; then it is cut after the trimmed text."""
    stripped = final.strip()
    if not stripped:
        raise ChatTemplateError("the final message has no text to continue")
    at = rendered.rfind(stripped)
    if at < 0:
        raise ChatTemplateError(
            "the model's chat template changes the final message's text, so it cannot be "
            "continued: end the conversation with a user message instead"
        )
    written = final.lstrip()  # kept as written (trailing spaces too) when the template did
    if rendered[at : at + len(written)] == written:
        return rendered[: at + len(written)]
    return rendered[: at + len(stripped)]


class ChatPrompter:
    """Renders conversations for one pipeline's tokenizer; safe to call from several threads."""

    def __init__(self, template: ChatTemplate, encode: Encode) -> None:
        self.template = template
        self._encode = encode
        self.adds_bos = tokenizer_adds_bos(encode, template.bos_token)
        self._base = len(encode(""))  # ids the tokenizer adds around any text (its BOS)
        self._counts: OrderedDict[str, int] = OrderedDict()
        self._overheads: dict[bool, tuple[int, int]] = {}  # has system -> (fixed, per message)
        self._lock = threading.Lock()

    @classmethod
    def for_tokenizer(cls, tokenizer: Tokenizer) -> ChatPrompter:
        """The prompter of an export's tokenizer (its folder holds the template)."""
        return cls(load_chat_template(tokenizer.folder), tokenizer.encode)

    @property
    def is_fallback(self) -> bool:
        return self.template.is_fallback

    @property
    def stop_strings(self) -> tuple[str, ...]:
        return self.template.stop_strings

    def text(self, messages: Messages, *, continue_final: bool = False, **variables: Any) -> str:
        """The conversation rendered with the generation prompt, ready for the tokenizer: a
        BOS the template writes is left out when the tokenizer adds one itself (never two).
        With ``continue_final`` the last message (the assistant's, cut short) is left open
        for the model to continue, as transformers' ``continue_final_message`` does.
        ``variables`` reach the template (``tools``)."""
        if continue_final:
            rendered = self._render(messages, add_generation_prompt=False, **variables)
            rendered = open_final_message(rendered, str(messages[-1].get("content") or ""))
        else:
            rendered = self._render(messages, add_generation_prompt=True, **variables)
        bos = self.template.bos_token
        if self.adds_bos and bos and rendered.startswith(bos):
            rendered = rendered[len(bos) :]
        return rendered

    def _render(self, messages: Messages, **options: Any) -> str:
        """The template's rendering of ``messages``, or, where it refuses their roles, of
        them reshaped as it takes them (see :mod:`~fleetgui.runtime.strict_roles`)."""
        try:
            return self.template.render(messages, **options)
        except ChatTemplateError as refused:
            for system_role in (True, False):
                shaped = reshaped(messages, system_role=system_role)
                if shaped == list(messages):
                    continue
                try:
                    text = self.template.render(shaped, **options)
                except ChatTemplateError:
                    continue
                log.debug("chat template refused the roles (%s); rendered reshaped", refused)
                return text
            raise

    def fit(self, messages: Messages, budget: int, *, continue_final: bool = False) -> ChatPrompt:
        """The longest recent part of the conversation whose prompt has at most ``budget``
        tokens. A leading system message and the last user turn are always kept, and the kept
        turns start with a user turn (templates that check alternation need it); if even that
        is too long the prompt is returned as it is (the pipeline then says so)."""
        messages = list(messages)
        head = messages[:1] if messages and messages[0].get("role") == SYSTEM else []
        turns = messages[len(head) :]
        starts = [0] + [i for i, m in enumerate(turns) if i and m.get("role") == USER]
        users = [i for i, m in enumerate(turns) if m.get("role") == USER]
        last = users[-1] if users else max(len(turns) - 1, 0)
        starts = [s for s in starts if s <= last] or [0]
        fixed, per = self._overhead(bool(head))
        if head:
            fixed += self._count(str(head[0].get("content", ""))) - self._count(PROBE_TEXT)
        costs = [per + self._count(str(m.get("content", ""))) for m in turns]
        tail = [0] * (len(costs) + 1)  # tail[i]: the cost of turns[i:]
        for i in range(len(costs) - 1, -1, -1):
            tail[i] = tail[i + 1] + costs[i]
        fitting = [i for i, s in enumerate(starts) if fixed + tail[s] <= budget]
        choice = fitting[0] if fitting else len(starts) - 1
        while True:
            kept = head + turns[starts[choice] :]
            text = self.text(kept, continue_final=continue_final)
            tokens = len(self._encode(text))
            if tokens <= budget or choice == len(starts) - 1:
                break
            log.debug("chat prompt: %d tokens > %d, one more turn left out", tokens, budget)
            choice += 1
        return ChatPrompt(text, tokens, dropped=starts[choice])

    # -- counting -----------------------------------------------------------------------------

    def _count(self, content: str) -> int:
        """Tokens of a message's text alone (cached: each text is encoded once)."""
        with self._lock:
            if content in self._counts:
                self._counts.move_to_end(content)
                return self._counts[content]
        count = max(len(self._encode(content)) - self._base, 0)
        with self._lock:
            self._counts[content] = count
            while len(self._counts) > CACHE_SIZE:
                self._counts.popitem(last=False)
        return count

    def _overhead(self, with_system: bool) -> tuple[int, int]:
        """(tokens of a conversation beside its turns, tokens each turn adds beside its text),
        measured on a one-turn and a three-turn probe of the same shape; with ``with_system``
        the fixed part holds a system message of :data:`PROBE_TEXT`."""
        with self._lock:
            known = self._overheads.get(with_system)
        if known is not None:
            return known
        head = [{"role": SYSTEM, "content": PROBE_TEXT}] if with_system else []
        one = [*head, {"role": USER, "content": PROBE_TEXT}]
        three = [*one, {"role": ASSISTANT, "content": PROBE_TEXT}, one[-1]]
        text_tokens = self._count(PROBE_TEXT)
        try:
            t1, t3 = (len(self._encode(self.text(c))) for c in (one, three))
            per = max((t3 - t1) // 2 - text_tokens, 0)
            fixed = t1 - per - text_tokens
        except ChatTemplateError as exc:  # a template with rules the probe breaks: estimate
            log.info("cannot measure the chat template's overhead (%s); estimating it", exc)
            per, fixed = DEFAULT_PER_MESSAGE, self._base + DEFAULT_PER_MESSAGE
        with self._lock:
            self._overheads[with_system] = (fixed, per)
        return fixed, per
