"""``InferenceService``: owns the deployed ``Pipeline`` and runs each reply as an asyncio task in
Qt's loop (through qasync), so the GUI thread never waits for a token.

Replies are numbered requests; their text arrives as ``delta`` signals and ends with exactly one
of ``finished``, ``stopped`` or ``failed``. Stop is cooperative (the stream ends at the next token,
where no stage is computing) and turns into a hard cancel if no token comes within
``HARD_STOP_S``. At most ``ModeSettings.concurrency`` replies generate at once; others queue.
``hold`` keeps every new reply in the queue, once the running ones have ended, until
``release``: the dashboard's benchmark has the pipeline to itself meanwhile.

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
from dataclasses import dataclass, field, replace
from typing import Any

from PySide6.QtCore import QObject, Signal

from fleetgui.app.deploy.interfaces import ServedPipeline
from fleetgui.app.errors import user_message
from fleetgui.app.mode import ModeSettings
from fleetgui.app.tasks import spawn
from fleetgui.errors import FleetguiError
from fleetgui.runtime.chat_prompt import ChatPrompter
from fleetgui.runtime.chat_template import FALLBACK_TEMPLATE, ChatTemplate, ChatTemplateError
from fleetgui.runtime.generation import GenerationOptions, GenerationResult, TokenDelta
from fleetgui.runtime.metrics import MetricEvent

log = logging.getLogger(__name__)

HARD_STOP_S = 3.0  # a stop that no token boundary honours within this time cancels the task
NO_TEMPLATE_NOTE = (
    "This model has no chat template: the chat is sent as a plain User:/Assistant: transcript, "
    "which an instruct model may answer poorly. Export it with its tokenizer_config.json or "
    "chat_template.jinja to use its own format."
)


class NoModelError(FleetguiError):
    """A reply was asked for before a model was deployed."""


class PipelineState(enum.StrEnum):
    """Whether replies can be served (``InferenceService.state_changed``)."""

    NO_MODEL = "no model"
    READY = "ready"  # ``InferenceService.description`` says what serves them
    CLOSING = "closing"  # the pipeline is being unloaded


@dataclass
class _Request:
    id: int
    prompt: str  # a chat's is rendered when it starts
    options: GenerationOptions
    stop: asyncio.Event = field(default_factory=asyncio.Event)
    task: asyncio.Task[None] | None = None
    messages: tuple[Mapping[str, Any], ...] | None = None  # a chat: its turns, oldest first


class _Gate:
    """A semaphore whose size can change while requests wait, and that can be held shut."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.active = 0
        self.held = False
        self._changed = asyncio.Condition()

    async def acquire(self) -> None:
        async with self._changed:
            await self._changed.wait_for(lambda: not self.held and self.active < self.limit)
            self.active += 1

    async def hold(self) -> None:
        """Shut the gate and wait until no request is past it."""
        async with self._changed:
            self.held = True
            try:
                await self._changed.wait_for(lambda: self.active == 0)
            except BaseException:  # cancelled while waiting: open again
                self.held = False
                self._changed.notify_all()
                raise

    async def open(self) -> None:
        async with self._changed:
            self.held = False
            self._changed.notify_all()

    async def release(self) -> None:
        async with self._changed:
            self.active -= 1
            self._changed.notify_all()

    async def resize(self, limit: int) -> None:
        async with self._changed:
            self.limit = limit
            self._changed.notify_all()


class InferenceService(QObject):
    """The app's one way to generate text."""

    state_changed = Signal(object)  # PipelineState
    mode_changed = Signal(object)  # ModeSettings
    started = Signal(int)  # request id: left the queue, generating
    delta = Signal(int, str)  # request id, new text
    finished = Signal(int, object)  # request id, GenerationResult
    stopped = Signal(int)  # request id: ended by stop(); the text so far stands
    failed = Signal(int, str)  # request id, message with the fix
    metric = Signal(object)  # every runtime MetricEvent of the current pipeline
    stream_opened = Signal(int, int)  # request id, its pipeline stream id (at its first tokens)
    chat_format_changed = Signal(str)  # "" (the model's own template, or no model) or a notice

    def __init__(self, parent: QObject | None = None) -> None:
        super().__init__(parent)
        self._pipeline: ServedPipeline | None = None
        self._prompter: ChatPrompter | None = None
        self._chat_note = ""
        self._description = ""
        self._unsubscribe: list[Callable[[], None]] = []
        self._mode = ModeSettings()
        self._gate: _Gate | None = None  # made on first use, inside the running loop
        self._ids = itertools.count(1)
        self._requests: dict[int, _Request] = {}

    # -- state --------------------------------------------------------------------------------

    @property
    def pipeline(self) -> ServedPipeline | None:
        return self._pipeline

    @property
    def mode(self) -> ModeSettings:
        return self._mode

    @property
    def has_draft(self) -> bool:
        return self._pipeline is not None and self._pipeline.draft is not None

    @property
    def state(self) -> PipelineState:
        return PipelineState.READY if self._pipeline is not None else PipelineState.NO_MODEL

    @property
    def description(self) -> str:
        """What serves the chat ("model on 3 PCs, draft ..."); "" with no model."""
        return self._description if self._pipeline is not None else ""

    @property
    def busy(self) -> bool:
        return bool(self._requests)

    @property
    def chat_format_note(self) -> str:
        """What the user should know about how chats are prompted ("" if nothing)."""
        return self._chat_note

    def chat_options(self, options: GenerationOptions) -> GenerationOptions:
        """``options`` with the stop strings the model's chat format needs (the plain
        transcript's; a chat template's replies end at the model's end-of-turn tokens)."""
        if self._prompter is None or not self._prompter.stop_strings:
            return options
        stops = tuple(dict.fromkeys((*options.stop_strings, *self._prompter.stop_strings)))
        return replace(options, stop_strings=stops)

    @property
    def held(self) -> bool:
        """New replies wait in the queue (see :meth:`hold`)."""
        return self._gate is not None and self._gate.held

    async def hold(self) -> None:
        """Keep new replies in the queue and wait for the running ones to end: the pipeline
        is the caller's alone until :meth:`release`."""
        if self._gate is None:
            self._gate = _Gate(self._mode.concurrency)
        await self._gate.hold()
        log.info("replies held back")

    async def release(self) -> None:
        """Let the held-back replies start again."""
        if self._gate is not None and self._gate.held:
            await self._gate.open()
            log.info("replies no longer held back")

    def set_mode(self, mode: ModeSettings) -> None:
        self._mode = mode
        if self._gate is not None:
            spawn(self._gate.resize(mode.concurrency), "resize generation gate")
        log.info("mode: %s", mode)
        self.mode_changed.emit(mode)

    async def install(self, pipeline: ServedPipeline, description: str) -> None:
        """Serve replies from ``pipeline`` from now on (after the current ones end)."""
        await self.unload()
        prompter, note = await asyncio.to_thread(_load_prompter, pipeline)  # encodes: off the GUI
        self._pipeline, self._prompter = pipeline, prompter
        self._description = description
        self._set_chat_note(note)
        self._unsubscribe = [pipeline.metrics.subscribe(self._on_metric)]
        log.info("pipeline ready: %s", description)
        self.state_changed.emit(self.state)

    async def unload(self) -> None:
        """Stop every reply and close the pipeline."""
        pipeline, self._pipeline = self._pipeline, None
        if pipeline is None:
            return
        self._prompter = None
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
        await pipeline.close()
        self.state_changed.emit(self.state)

    def _on_metric(self, event: MetricEvent) -> None:
        self.metric.emit(event)

    def _set_chat_note(self, note: str) -> None:
        if note != self._chat_note:
            self._chat_note = note
            self.chat_format_changed.emit(note)

    # -- requests -----------------------------------------------------------------------------

    def submit(self, prompt: str, options: GenerationOptions) -> int:
        """Queue a reply to ``prompt``; returns its request id. Problems arrive as ``failed``."""
        request = _Request(next(self._ids), prompt, options)
        self._requests[request.id] = request
        request.task = spawn(self._run(request), f"reply {request.id}")
        return request.id

    def submit_chat(self, messages: Sequence[Mapping[str, Any]], options: GenerationOptions) -> int:
        """Queue the reply to a conversation (``{"role", "content"}`` turns ending with the
        user's); its prompt is rendered with the model's chat template when it starts, the
        oldest turns left out if it would not leave ``options.max_new_tokens`` in the context."""
        request = _Request(next(self._ids), "", options, messages=tuple(messages))
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

    def _check(self, options: GenerationOptions) -> ServedPipeline:
        if self._pipeline is None:
            raise NoModelError(
                "no model is deployed: open 'Model & deployment', choose an export and press Deploy"
            )
        if options.speculative and self._pipeline.draft is None:
            raise NoModelError(
                f"{self._mode.mode.label} needs a draft: choose a draft model or n-gram under "
                "Mode and press Deploy again, or switch the mode to PP"
            )
        return self._pipeline

    async def _run(self, request: _Request) -> None:
        if self._gate is None:
            self._gate = _Gate(self._mode.concurrency)
        gate = self._gate
        acquired = False
        try:
            pipeline = self._check(request.options)
            await gate.acquire()
            acquired = True
            if request.messages is not None and not request.stop.is_set():
                request.prompt = await asyncio.to_thread(self._chat_prompt, pipeline, request)
            result = None if request.stop.is_set() else await self._generate(pipeline, request)
            if result is None:
                self.stopped.emit(request.id)
            else:
                self.finished.emit(request.id, result)
        except asyncio.CancelledError:
            self.stopped.emit(request.id)
        except Exception as exc:
            log.info("reply %d failed: %s", request.id, exc)
            self.failed.emit(request.id, user_message(exc))
        finally:
            self._requests.pop(request.id, None)
            if acquired:
                await gate.release()

    def _chat_prompt(self, pipeline: ServedPipeline, request: _Request) -> str:
        """The chat's prompt, fitted to the context (runs in a worker thread)."""
        prompter = self._prompter
        if prompter is None or pipeline is not self._pipeline:
            raise NoModelError("the model was unloaded: press Deploy and send the message again")
        budget = pipeline.context_limit - request.options.max_new_tokens
        prompt = prompter.fit(request.messages or (), budget)
        if prompt.dropped:
            log.info(
                "reply %d: %d oldest message(s) left out to fit the context (%d tokens)",
                request.id,
                prompt.dropped,
                prompt.tokens,
            )
        return prompt.text

    async def _generate(
        self, pipeline: ServedPipeline, request: _Request
    ) -> GenerationResult | None:
        """Stream the reply out as signals; its result, or None if stopped first."""
        self.started.emit(request.id)
        result: GenerationResult | None = None
        stream = pipeline.stream(request.prompt, request.options)
        opened = False
        try:
            async for item in stream:
                if isinstance(item, TokenDelta):
                    if not opened:  # metric events name streams by id: say whose this one is
                        opened = True
                        self.stream_opened.emit(request.id, item.stream_id)
                    if item.text:
                        self.delta.emit(request.id, item.text)
                else:
                    result = item
                if request.stop.is_set():
                    break
        finally:
            # end the generator here, at a token boundary, so its stages release the stream
            aclose = getattr(stream, "aclose", None)
            if aclose is not None:
                await aclose()
        return result


def _load_prompter(pipeline: ServedPipeline) -> tuple[ChatPrompter, str]:
    """The pipeline's chat prompter and the note for the user: the plain transcript's (no
    template), or why the model's template could not be used."""
    tokenizer = pipeline.tokenizer
    try:
        prompter = ChatPrompter.for_tokenizer(tokenizer)
    except ChatTemplateError as exc:
        log.warning("%s", exc)
        fallback = ChatPrompter(ChatTemplate(FALLBACK_TEMPLATE), tokenizer.encode)
        return fallback, f"{exc}. The chat is sent as a plain User:/Assistant: transcript."
    return prompter, NO_TEMPLATE_NOTE if prompter.is_fallback else ""
