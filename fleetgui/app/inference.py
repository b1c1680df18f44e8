"""``InferenceService``: holds the deployed ``LLMPipeline`` and runs each reply as an asyncio task
in Qt's loop (through qasync), so the GUI thread never waits for a token.

Replies are numbered requests; their text arrives as ``delta`` signals and ends with exactly one
of ``finished``, ``stopped`` or ``failed``. Stop is cooperative (the stream ends at the next token,
where no stage is computing) and turns into a hard cancel if no token comes within
``HARD_STOP_S``. Each reply generates through the deployed ``LLMPipeline``, with one
``GenerationConfig``; at most ``ModeSettings.concurrency`` generations run at
once (the pipeline's stream limit: the API's requests count too), others queue there. ``hold``
keeps every new one in the queue, once the running ones have ended, until ``release``: the
dashboard's benchmark has the stages to itself meanwhile.

A chat reply (``submit_chat``) is prompted with the model's own chat template; the conversation
is rendered, and its oldest turns dropped to fit the context, in a worker thread as the reply
starts (``fleetgui.runtime.chat_prompt``).
"""

from __future__ import annotations

import asyncio
import enum
import itertools
import logging
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from PySide6.QtCore import QObject, Signal

from fleetgui.app.errors import user_message
from fleetgui.app.mode import ModeSettings
from fleetgui.app.tasks import spawn
from fleetgui.errors import FleetguiError
from fleetgui.generation_config import GenerationConfig
from fleetgui.llm_pipeline import LLMPipeline
from fleetgui.runtime.chat_prompt import ChatPrompter
from fleetgui.runtime.chat_template import (
    FALLBACK_TEMPLATE,
    ChatTemplate,
    ChatTemplateError,
    no_template_note,
)
from fleetgui.runtime.generation import GenerationResult, Runtime, TokenDelta
from fleetgui.runtime.metrics import MetricEvent

log = logging.getLogger(__name__)

HARD_STOP_S = 3.0  # a stop that no token boundary honours within this time cancels the task


class NoModelError(FleetguiError):
    """A reply was asked for before a model was deployed."""


class PipelineState(enum.StrEnum):
    """Whether replies can be served (``InferenceService.state_changed``)."""

    NO_MODEL = "no model"
    READY = "ready"  # ``InferenceService.description`` says what serves them
    CLOSING = "closing"  # the pipeline is being unloaded


@dataclass(frozen=True)
class ReplyFigures:
    """What a reply ended early (``InferenceService.stopped``) had generated: its footer says
    so as a finished reply's does, from the streamed tokens (a stopped one has no result)."""

    tokens: int = 0
    ttft_ms: float = 0.0
    tokens_per_s: float = 0.0  # as GenerationResult's: tokens after the first / time after it


@dataclass
class _Request:
    id: int
    prompt: str  # a chat's is rendered when it starts
    config: GenerationConfig
    stop: asyncio.Event = field(default_factory=asyncio.Event)
    task: asyncio.Task[None] | None = None
    messages: tuple[Mapping[str, Any], ...] | None = None  # a chat: its turns, oldest first
    tokens: int = 0  # streamed so far
    started_at: float = 0.0  # loop time it began generating; then its first and last token's
    first_at: float = 0.0
    last_at: float = 0.0

    def figures(self) -> ReplyFigures:
        if not self.tokens:
            return ReplyFigures()
        decode_s = self.last_at - self.first_at
        rate = (self.tokens - 1) / decode_s if self.tokens > 1 and decode_s > 0 else 0.0
        return ReplyFigures(self.tokens, (self.first_at - self.started_at) * 1000, rate)


class InferenceService(QObject):
    """The app's one way to generate text."""

    state_changed = Signal(object)  # PipelineState
    mode_changed = Signal(object)  # ModeSettings
    started = Signal(int)  # request id: left the queue, generating (at its first tokens)
    delta = Signal(int, str)  # request id, new text
    finished = Signal(int, object)  # request id, GenerationResult
    stopped = Signal(int, object)  # request id, ReplyFigures: ended by stop(); the text stands
    failed = Signal(int, str)  # request id, message with the fix
    metric = Signal(object)  # every runtime MetricEvent of the current pipeline
    stream_opened = Signal(int, int)  # request id, its pipeline stream id (at its first tokens)
    chat_format_changed = Signal(str)  # "" (the model's own template, or no model) or a notice

    def __init__(self, parent: QObject | None = None) -> None:
        super().__init__(parent)
        self._llm: LLMPipeline | None = None  # the deployed pipeline
        self._chat_note = ""
        self._description = ""
        self._unsubscribe: list[Callable[[], None]] = []
        self._mode = ModeSettings()
        self._held = False  # hold() until release(), whichever pipeline is installed
        self._ids = itertools.count(1)
        self._requests: dict[int, _Request] = {}

    # -- state --------------------------------------------------------------------------------

    @property
    def pipeline(self) -> Runtime | None:
        """The deployed runtime pipeline (None: no model)."""
        return None if self._llm is None else self._llm.runtime

    @property
    def llm(self) -> LLMPipeline | None:
        """The deployed pipeline (what replies and the API generate with)."""
        return self._llm

    @property
    def mode(self) -> ModeSettings:
        return self._mode

    @property
    def has_draft(self) -> bool:
        pipeline = self.pipeline
        return pipeline is not None and pipeline.draft is not None

    @property
    def state(self) -> PipelineState:
        return PipelineState.READY if self._llm is not None else PipelineState.NO_MODEL

    @property
    def description(self) -> str:
        """What serves the chat ("model on 3 PCs, draft ..."); "" with no model."""
        return self._description if self._llm is not None else ""

    @property
    def busy(self) -> bool:
        return bool(self._requests)

    @property
    def chat_format_note(self) -> str:
        """What the user should know about how chats are prompted ("" if nothing)."""
        return self._chat_note

    @property
    def held(self) -> bool:
        """New replies wait in the queue (see :meth:`hold`)."""
        return self._held

    async def hold(self) -> None:
        """Keep new replies (and the API's requests) in the queue and wait for the running
        ones to end: the stages are the caller's alone until :meth:`release`. The caller
        generates meanwhile through a pipeline with a limit of its own
        (``Pipeline.with_streams``)."""
        self._held = True
        if self._llm is not None:
            try:
                await self._llm.ahold()
            except BaseException:  # cancelled while waiting: let go
                self._held = False
                raise
        log.info("replies held back")

    async def release(self) -> None:
        """Let the held-back replies start again."""
        if self._held:
            self._held = False
            if self._llm is not None:
                self._llm.resume()
            log.info("replies no longer held back")

    def set_mode(self, mode: ModeSettings) -> None:
        self._mode = mode
        if self._llm is not None:
            self._llm.max_streams = mode.concurrency
        log.info("mode: %s", mode)
        self.mode_changed.emit(mode)

    async def install(self, llm: LLMPipeline, description: str) -> None:
        """Serve replies from ``llm`` from now on (after the current ones end); unloading it
        closes it."""
        await self.unload()
        pipeline = llm.runtime
        prompter, note = await asyncio.to_thread(_load_prompter, pipeline)  # encodes: off the GUI
        llm.prompter = prompter
        llm.max_streams = self._mode.concurrency
        if self._held:  # held before: the new pipeline is held too
            await llm.ahold()
        self._llm = llm
        self._description = description
        self._set_chat_note(note)
        self._unsubscribe = [pipeline.metrics.subscribe(self._on_metric)]
        log.info("pipeline ready: %s", description)
        self.state_changed.emit(self.state)

    async def unload(self) -> None:
        """Stop every reply and close the pipeline."""
        llm, self._llm = self._llm, None
        if llm is None:
            return
        self._set_chat_note("")
        self.state_changed.emit(PipelineState.CLOSING)
        for request in list(self._requests.values()):
            self.stop(request.id)
        tasks = [r.task for r in self._requests.values() if r.task is not None]
        if tasks:
            await asyncio.gather(*tasks, return_exceptions=True)
        for unsubscribe in self._unsubscribe:
            unsubscribe()
        self._unsubscribe = []
        await llm.aclose(unload=True)  # its workers drop the stages too
        self.state_changed.emit(self.state)

    def _on_metric(self, event: MetricEvent) -> None:
        self.metric.emit(event)

    def _set_chat_note(self, note: str) -> None:
        if note != self._chat_note:
            self._chat_note = note
            self.chat_format_changed.emit(note)

    # -- requests -----------------------------------------------------------------------------

    def submit(self, prompt: str, config: GenerationConfig) -> int:
        """Queue a reply to ``prompt``; returns its request id. Problems arrive as ``failed``."""
        request = _Request(next(self._ids), prompt, config)
        self._requests[request.id] = request
        request.task = spawn(self._run(request), f"reply {request.id}")
        return request.id

    def submit_chat(self, messages: Sequence[Mapping[str, Any]], config: GenerationConfig) -> int:
        """Queue the reply to a conversation (``{"role", "content"}`` turns ending with the
        user's); its prompt is rendered with the model's chat template when it starts, the
        oldest turns left out if it would not leave ``config.max_new_tokens`` in the context."""
        request = _Request(next(self._ids), "", config, messages=tuple(messages))
        self._requests[request.id] = request
        request.task = spawn(self._run(request), f"reply {request.id}")
        return request.id

    def stop(self, request_id: int) -> None:
        """End a reply at its next token (or cancel it if that takes too long)."""
        request = self._requests.get(request_id)
        if request is None or request.stop.is_set():
            return
        request.stop.set()
        if request.task is not None:
            task = request.task
            loop = asyncio.get_running_loop()
            loop.call_later(HARD_STOP_S, lambda: None if task.done() else task.cancel())

    def _check(self, config: GenerationConfig) -> LLMPipeline:
        if self._llm is None:
            raise NoModelError(
                "no model is deployed: open 'Model & deployment', choose an export and press Deploy"
            )
        if config.speculative and self._llm.runtime.draft is None:
            raise NoModelError(
                f"{self._mode.mode.label} needs a draft: choose a draft model or n-gram under "
                "Mode and press Deploy again, or switch the mode to PP"
            )
        return self._llm

    async def _run(self, request: _Request) -> None:
        try:
            llm = self._check(request.config)
            if request.messages is not None and not request.stop.is_set():
                request.prompt, request.config = await asyncio.to_thread(
                    self._chat_prompt, llm, request
                )
            result = None if request.stop.is_set() else await self._generate(llm, request)
            if result is None:
                self.stopped.emit(request.id, request.figures())
            else:
                self.finished.emit(request.id, result)
        except asyncio.CancelledError:
            self.stopped.emit(request.id, request.figures())
        except Exception as exc:
            log.info("reply %d failed: %s", request.id, exc)
            self.failed.emit(request.id, user_message(exc))
        finally:
            self._requests.pop(request.id, None)

    def _chat_prompt(self, llm: LLMPipeline, request: _Request) -> tuple[str, GenerationConfig]:
        """The chat's prompt, fitted to the context, and its configuration (runs in a worker
        thread)."""
        if llm is not self._llm:
            raise NoModelError("the model was unloaded: press Deploy and send the message again")
        return llm.chat_prompt(request.messages or (), request.config, fit=True)

    async def _generate(self, llm: LLMPipeline, request: _Request) -> GenerationResult | None:
        """Stream the reply out as signals; its result, or None if stopped first. It waits for
        a slot in the pipeline (``started`` says when it has one: at its first tokens)."""
        result: GenerationResult | None = None
        loop = asyncio.get_running_loop()
        request.started_at = loop.time()
        stream = llm.astream_result(request.prompt, request.config)
        opened = False
        try:
            async for item in stream:
                if not opened:
                    opened = True
                    self.started.emit(request.id)
                    if isinstance(item, TokenDelta):  # metric events name streams by id
                        self.stream_opened.emit(request.id, item.stream_id)
                if isinstance(item, TokenDelta):
                    if item.token_ids:
                        request.last_at = loop.time()
                        request.first_at = request.first_at or request.last_at
                        request.tokens += len(item.token_ids)
                    if item.text:
                        self.delta.emit(request.id, item.text)
                else:
                    result = item
                if request.stop.is_set():
                    break
        finally:
            # end the generator here, at a token boundary, so its stages release the stream
            await stream.aclose()
        return result


def _load_prompter(pipeline: Runtime) -> tuple[ChatPrompter, str]:
    """The pipeline's chat prompter and the note for the user: the plain transcript's (no
    template), or why the model's template could not be used."""
    tokenizer = pipeline.tokenizer
    try:
        prompter = ChatPrompter.for_tokenizer(tokenizer)
    except ChatTemplateError as exc:
        log.warning("%s", exc)
        fallback = ChatPrompter(ChatTemplate(FALLBACK_TEMPLATE), tokenizer.encode)
        return fallback, f"{exc}. The chat is sent as a plain User:/Assistant: transcript."
    return prompter, no_template_note(prompter.template)
