"""What :func:`fleetgui.open` (the assembler) returns: :class:`LLMPipeline` generates, streams
and chats with the model it opened, and owns the fleet sessions the model runs on. The app, the
API, the CLI and Python callers all generate through one.

Like ``openvino_genai.LLMPipeline``, it is used from plain synchronous code; it runs the fleet's
asyncio machinery on a thread of its own, so a script, a notebook or a web handler need not
know about the event loop. Async callers use the ``a``-prefixed methods instead, which return
to the caller's loop. One :class:`~fleetgui.generation_config.GenerationConfig` says how to
decode; at most ``max_streams`` generations run at once, more wait their turn.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import AsyncGenerator, Callable, Coroutine, Iterator, Mapping, Sequence
from dataclasses import replace
from typing import TYPE_CHECKING, Any, TypeVar

from fleetgui.errors import FleetguiError
from fleetgui.generation_config import GenerationConfig

if TYPE_CHECKING:
    from fleetgui.fleet.session.session import FleetSession
    from fleetgui.loop_thread import LoopThread
    from fleetgui.runtime.chat_prompt import ChatPrompter
    from fleetgui.runtime.generation import GenerationResult, Runtime, TokenDelta
    from fleetgui.runtime.tokenizer import Tokenizer

log = logging.getLogger(__name__)

T = TypeVar("T")
#: How long a worker is given to drop its stages when a pipeline closes with ``unload``: freeing
#: a large model's memory takes a moment; a worker that does not answer in time is logged.
UNLOAD_TIMEOUT_S = 10.0
Messages = Sequence[Mapping[str, Any]]


class LLMPipeline:
    """A model opened by :func:`fleetgui.open`: ``generate``, ``stream`` and ``chat`` (and their
    async forms ``agenerate``, ``astream``, ``achat``). Close it (or use ``with``) to free this
    PC's and the workers' memory."""

    def __init__(
        self,
        runtime: Runtime,
        sessions: Sequence[FleetSession] = (),
        max_streams: int | None = None,
        *,
        prompter: ChatPrompter | None = None,
        thread: LoopThread | None = None,
    ) -> None:
        """``sessions``: the fleet sessions ``runtime`` runs on (closed after it: one for a
        pipeline on a fleet, one a replica for replicas, none on this PC alone); ``thread``:
        the loop :func:`fleetgui.open` runs it on, which synchronous calls use (None: the
        caller's loop, for the async methods only)."""
        self._runtime = runtime
        self._sessions = tuple(sessions)
        self._thread = thread
        self._closed = False
        self._prompter = prompter  # read from the export when a chat first needs it
        if max_streams is not None:
            self.max_streams = max_streams  # the pipeline itself makes the others wait

    @classmethod
    def over(
        cls,
        runtime: Runtime,
        *,
        max_streams: int | None = None,
        prompter: ChatPrompter | None = None,
    ) -> LLMPipeline:
        """The pipeline over a runtime opened without :func:`fleetgui.aopen` (a test's or a
        benchmark's own ``Pipeline``); it runs on the caller's event loop: use the async
        methods. ``max_streams``: generations at once (None: the runtime's limit as it is).
        ``prompter``: how chats are rendered (default: the export's chat template, read when
        first needed; a ``ChatTemplateError`` if it cannot be)."""
        return cls(runtime, (), max_streams, prompter=prompter)

    # -- what it serves -------------------------------------------------------------------------

    @property
    def runtime(self) -> Runtime:
        """The runtime pipeline underneath (its stages, drafter, metrics and stream limit)."""
        return self._runtime

    @property
    def sessions(self) -> tuple[FleetSession, ...]:
        """The fleet sessions it runs on: none on this PC alone, one for a pipeline over a
        fleet, one per replica for replicas."""
        return self._sessions

    @property
    def tokenizer(self) -> Tokenizer:
        return self._runtime.tokenizer

    @property
    def context_limit(self) -> int:
        """The most tokens a prompt and its answer may hold together."""
        return int(self._runtime.context_limit)

    @property
    def max_streams(self) -> int | None:
        """Generations at once; more wait their turn (None: no limit)."""
        limit = self._runtime.streams.limit
        return None if limit is None else int(limit)

    @max_streams.setter
    def max_streams(self, limit: int) -> None:
        if limit < 1:
            raise FleetguiError(f"max_streams must be at least 1, got {limit}")
        self._on_loop(lambda: self._runtime.streams.set(limit))

    @property
    def held(self) -> bool:
        """New generations wait until :meth:`resume` (see :meth:`ahold`)."""
        return bool(self._runtime.streams.held)

    async def ahold(self) -> None:
        """Keep new generations waiting and return once the running ones have ended: the
        stages are the caller's alone (e.g. to benchmark them) until :meth:`resume`."""
        await self._runtime.streams.hold()

    def resume(self) -> None:
        """Let the generations held back by :meth:`ahold` start."""
        self._on_loop(self._runtime.streams.resume)

    # -- chats ----------------------------------------------------------------------------------

    @property
    def prompter(self) -> ChatPrompter:
        """How chats are rendered for this model (its chat template, or a plain transcript)."""
        if self._prompter is None:
            from fleetgui.runtime.chat_prompt import ChatPrompter

            self._prompter = ChatPrompter.for_tokenizer(self._runtime.tokenizer)
        return self._prompter

    @prompter.setter
    def prompter(self, prompter: ChatPrompter) -> None:
        """Render chats with ``prompter`` (e.g. the plain transcript where the model's template
        cannot be used)."""
        self._prompter = prompter

    @property
    def has_chat_template(self) -> bool:
        """False: the model has none, and chats go as a plain ``User:``/``Assistant:``
        transcript (which an instruct model may answer poorly)."""
        return not self.prompter.is_fallback

    def chat_config(self, config: GenerationConfig | None = None) -> GenerationConfig:
        """``config`` with the stop strings the chat format needs added (the plain
        transcript's; a chat template's replies end at the model's end-of-turn tokens)."""
        config = config or GenerationConfig()
        stops = tuple(dict.fromkeys((*config.stop, *self.prompter.stop_strings)))
        return config if stops == tuple(config.stop) else replace(config, stop=stops)

    def chat_prompt(
        self,
        messages: Messages,
        config: GenerationConfig | None = None,
        *,
        fit: bool = False,
        tools: list[dict[str, Any]] | None = None,
        continue_final: bool = False,
    ) -> tuple[str, GenerationConfig]:
        """``messages`` (``[{"role": "user", "content": ...}]``) as the prompt text to generate
        from, rendered with the model's chat template, and :meth:`chat_config` of ``config``.
        With ``fit`` the oldest turns are left out while the prompt would not leave
        ``config.max_new_tokens`` in the context. ``tools``: function definitions (OpenAI's
        form) the model's template shows it. ``continue_final``: the answer continues the last
        message (the assistant's) instead of starting a new one. Renders and encodes: async
        callers run it in a thread."""
        config = self.chat_config(config)
        if tools:  # as the model's template shows tools (fitting keeps every turn then)
            return self.prompter.text(messages, tools=tools, continue_final=continue_final), config
        if not fit:
            return self.prompter.text(messages, continue_final=continue_final), config
        budget = self.context_limit - config.max_new_tokens
        prompt = self.prompter.fit(messages, budget, continue_final=continue_final)
        if prompt.dropped:
            log.info(
                "chat: %d oldest message(s) left out to fit the context (%d tokens)",
                prompt.dropped,
                prompt.tokens,
            )
        return prompt.text, config

    # -- async ----------------------------------------------------------------------------------

    async def agenerate(self, prompt: str, config: GenerationConfig | None = None) -> str:
        """The answer to ``prompt`` (plain text continued as it is)."""
        return (await self.agenerate_result(prompt, config)).text

    async def agenerate_result(
        self, prompt: str, config: GenerationConfig | None = None
    ) -> GenerationResult:
        """As :meth:`agenerate`, with token ids, counts and timings
        (:class:`~fleetgui.runtime.generation.GenerationResult`)."""
        return await self._runtime.complete(prompt, config or GenerationConfig())

    def astream_result(
        self, prompt: str, config: GenerationConfig | None = None
    ) -> AsyncGenerator[TokenDelta | GenerationResult, None]:
        """A :class:`~fleetgui.runtime.generation.TokenDelta` as each piece of the answer is
        accepted (its text, token ids and stream id), then the
        :class:`~fleetgui.runtime.generation.GenerationResult`. Nothing comes while the
        generation waits for a slot. Leaving the loop early (or ``aclose``) stops the
        generation and frees its state on every PC. (The runtime's own generator, not one
        wrapped around it: a token passes through no layer of this class.)"""
        return self._runtime.stream(prompt, config or GenerationConfig())

    async def astream(
        self, prompt: str, config: GenerationConfig | None = None
    ) -> AsyncGenerator[str, None]:
        """The answer's text as it is generated (see :meth:`astream_result`)."""
        from fleetgui.runtime.generation import TokenDelta

        async with contextlib.aclosing(self.astream_result(prompt, config)) as items:
            async for item in items:
                if isinstance(item, TokenDelta) and item.text:
                    yield item.text

    async def achat(self, messages: Messages, config: GenerationConfig | None = None) -> str:
        """The assistant's reply to ``messages`` (``[{"role": "user", "content": ...}]``),
        rendered with the model's chat template and ended at its end-of-turn token."""
        return await self.agenerate(*self.chat_prompt(messages, config))

    async def aclose(self, *, unload: bool = False) -> None:
        """Free the model here and close the fleet sessions; with ``unload`` the workers drop
        the stages too (else they keep them loaded, and a later opening of the same export
        reuses them). A second call does nothing."""
        if self._closed:
            return
        self._closed = True
        try:
            await self._runtime.close()
        finally:
            for session in self._sessions:
                await session.close(unload=unload, timeout_s=UNLOAD_TIMEOUT_S)

    # -- sync -----------------------------------------------------------------------------------

    def _run(self, coro: Coroutine[Any, Any, T]) -> T:
        if self._thread is None:
            coro.close()
            raise FleetguiError(
                "this pipeline was opened with aopen(): use the async methods (agenerate, ...)"
            )
        return self._thread.run(coro)

    def _on_loop(self, change: Callable[[], None]) -> None:
        """Run ``change`` on the pipeline's loop, where the stream limit's waiters are."""
        if self._thread is None:
            change()  # aopen() or over(): the caller is on the loop
            return

        async def apply() -> None:
            change()

        self._thread.run(apply())

    def generate(self, prompt: str, config: GenerationConfig | None = None, **fields: Any) -> str:
        """The answer to ``prompt``; ``fields`` override ``config``'s (e.g.
        ``max_new_tokens=64``)."""
        return self._run(self.agenerate(prompt, _merged(config, fields)))

    def stream(
        self, prompt: str, config: GenerationConfig | None = None, **fields: Any
    ) -> Iterator[str]:
        """The answer's text as it is generated (see :meth:`astream`)."""
        items = self.astream(prompt, _merged(config, fields))

        async def step() -> str | None:
            return await anext(items, None)

        try:
            while (text := self._run(step())) is not None:
                yield text
        finally:
            self._run(items.aclose())

    def chat(
        self, messages: Messages, config: GenerationConfig | None = None, **fields: Any
    ) -> str:
        """The assistant's reply to ``messages`` (see :meth:`achat`)."""
        return self._run(self.achat(messages, _merged(config, fields)))

    def close(self) -> None:
        """Free the model here and on the workers, and stop the pipeline's thread."""
        if self._thread is None:
            raise FleetguiError("this pipeline was opened with aopen(): await aclose()")
        try:
            self._run(self.aclose())
        finally:
            self._thread.stop()

    def __enter__(self) -> LLMPipeline:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _merged(config: GenerationConfig | None, fields: Mapping[str, Any]) -> GenerationConfig:
    try:
        return replace(config or GenerationConfig(), **fields)
    except TypeError as exc:
        raise FleetguiError(f"not a GenerationConfig field: {exc}") from None
