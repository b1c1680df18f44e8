"""The Python front door: :func:`open` a model on this PC or a fleet and generate with it.

Like ``openvino_genai.LLMPipeline``, an :class:`LLMPipeline` is used from plain synchronous
code; it runs the fleet's asyncio machinery on a thread of its own, so a script, a notebook or
a web handler need not know about the event loop. Async callers use the ``a``-prefixed methods
instead, which return to the caller's loop. One :class:`GenerationConfig` says how to decode;
at most ``max_streams`` generations run at once, more wait their turn.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import threading
from collections.abc import AsyncIterator, Coroutine, Iterator, Mapping, Sequence
from concurrent.futures import Future
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Literal, TypeVar

from fleetgui.errors import FleetguiError

log = logging.getLogger(__name__)

T = TypeVar("T")
Layout = Literal["pipeline", "copies"]


@dataclass(frozen=True)
class GenerationConfig:
    """How to decode one answer.

    ``temperature == 0`` is greedy decoding: token for token the unsplit model's answer. ``k``
    turns speculative decoding on (it needs ``draft`` at :func:`open`): a number of draft
    tokens per round, or ``"auto"`` to choose it from the measured acceptance and timings.
    """

    max_new_tokens: int = 128
    temperature: float = 0.0
    top_k: int = 0  # 0: no top-k cut
    top_p: float = 1.0
    seed: int | None = None  # a seed makes sampling repeatable
    stop: tuple[str, ...] = ()  # strings that end the answer (not included)
    k: int | Literal["auto"] | None = None  # None: no speculative decoding

    def options(self) -> Any:
        """The runtime's options for this configuration (checked there)."""
        from fleetgui.runtime.generation import GenerationOptions
        from fleetgui.runtime.head import SamplingParams

        try:
            sampling = SamplingParams(self.temperature, self.top_k, self.top_p, self.seed)
        except ValueError as exc:
            raise FleetguiError(f"GenerationConfig: {exc}") from None
        return GenerationOptions(
            max_new_tokens=self.max_new_tokens,
            sampling=sampling,
            stop_strings=tuple(self.stop),
            speculative=self.k is not None,
            k=None if self.k in (None, "auto") else int(self.k),
        )


class _LoopThread:
    """An asyncio loop on a daemon thread, for synchronous callers."""

    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self.loop.run_forever, name="fleetgui", daemon=True)
        self._thread.start()

    def submit(self, coro: Coroutine[Any, Any, T]) -> Future[T]:
        return asyncio.run_coroutine_threadsafe(coro, self.loop)

    def run(self, coro: Coroutine[Any, Any, T]) -> T:
        return self.submit(coro).result()

    def stop(self) -> None:
        self.loop.call_soon_threadsafe(self.loop.stop)
        self._thread.join(10)
        if not self.loop.is_running():
            self.loop.close()


class LLMPipeline:
    """A model opened by :func:`open`: ``generate``, ``stream`` and ``chat`` (and their async
    forms ``agenerate``, ``astream``, ``achat``). Close it (or use ``with``) to free this PC's
    and the workers' memory."""

    def __init__(self, runtime: Any, closers: Sequence[Any], max_streams: int) -> None:
        self._runtime = runtime  # runtime.pipeline.Pipeline or fleet.replicas.ReplicatedPipeline
        self._closers = list(closers)  # fleet sessions to close after the pipeline
        runtime.streams.set(max_streams)  # the pipeline itself makes the others wait
        self._thread: _LoopThread | None = None
        from fleetgui.runtime.chat_prompt import ChatPrompter

        self._prompter = ChatPrompter.for_tokenizer(runtime.tokenizer)

    @property
    def context_limit(self) -> int:
        """The most tokens a prompt and its answer may hold together."""
        return int(self._runtime.context_limit)

    @property
    def max_streams(self) -> int:
        """Generations at once; more wait their turn."""
        return int(self._runtime.streams.limit)

    # -- async ----------------------------------------------------------------------------------

    async def agenerate(self, prompt: str, config: GenerationConfig | None = None) -> str:
        """The answer to ``prompt`` (plain text continued as it is)."""
        return (await self.agenerate_result(prompt, config)).text

    async def agenerate_result(self, prompt: str, config: GenerationConfig | None = None) -> Any:
        """As :meth:`agenerate`, with token ids, counts and timings
        (:class:`~fleetgui.runtime.generation.GenerationResult`)."""
        return await self._runtime.complete(prompt, (config or GenerationConfig()).options())

    async def astream(
        self, prompt: str, config: GenerationConfig | None = None
    ) -> AsyncIterator[str]:
        """The answer's text as it is generated; leaving the loop early stops the generation
        and frees its state on every PC."""
        from fleetgui.runtime.generation import TokenDelta

        options = (config or GenerationConfig()).options()
        async with contextlib.aclosing(self._runtime.stream(prompt, options)) as items:
            async for item in items:
                if isinstance(item, TokenDelta) and item.text:
                    yield item.text

    async def achat(
        self, messages: Sequence[Mapping[str, Any]], config: GenerationConfig | None = None
    ) -> str:
        """The assistant's reply to ``messages`` (``[{"role": "user", "content": ...}]``),
        rendered with the model's chat template and ended at its end-of-turn token."""
        return await self.agenerate(self._prompter.text(messages), self._chat_config(config))

    def _chat_config(self, config: GenerationConfig | None) -> GenerationConfig:
        config = config or GenerationConfig()
        return replace(config, stop=tuple(config.stop) + self._prompter.stop_strings)

    async def aclose(self) -> None:
        await self._runtime.close()
        for closer in self._closers:
            await closer.close()

    # -- sync -----------------------------------------------------------------------------------

    def _run(self, coro: Coroutine[Any, Any, T]) -> T:
        if self._thread is None:
            raise FleetguiError(
                "this pipeline was opened with aopen(): use the async methods (agenerate, ...)"
            )
        return self._thread.run(coro)

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
            self._run(items.aclose())  # type: ignore[attr-defined]

    def chat(
        self,
        messages: Sequence[Mapping[str, Any]],
        config: GenerationConfig | None = None,
        **fields: Any,
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


def _export_of(source: Path, stages: int, weights: str) -> Path:
    """``source`` itself if it is an export, else ``source`` exported into the shard cache in
    ``stages`` stages (reused while complete and current)."""
    if (source / "manifest.json").is_file():
        return source
    from fleetgui.export.exporter import ExportRequest, export_model
    from fleetgui.paths import shards_cache_dir

    out = shards_cache_dir() / f"{source.stem}-{stages}stages-{weights}"
    log.info("exporting %s into %s", source, out)
    export_model(ExportRequest(source, out, stages=stages, weights=weights))
    return out


async def aopen(
    source: str | Path,
    *,
    workers: Sequence[str] | str = (),
    draft: str | Path | None = None,
    layout: Layout = "pipeline",
    max_streams: int = 4,
    weights: str = "int4",
    identity: str | Path | None = None,
    threads: int = 0,
    precision: str = "auto",
) -> LLMPipeline:
    """:func:`open` for callers with an event loop of their own (the pipeline then runs on it:
    use its async methods)."""
    from fleetgui.runtime.draft_source import parse_draft
    from fleetgui.runtime.loader import LocalPipelineConfig, load_local_pipeline
    from fleetgui.runtime.ov_stage import StageConfig

    if max_streams < 1:
        raise FleetguiError(f"max_streams must be at least 1, got {max_streams}")
    if layout not in ("pipeline", "copies"):
        raise FleetguiError(f"layout must be 'pipeline' or 'copies', not {layout!r}")
    addresses = [w.strip() for w in (workers.split(",") if isinstance(workers, str) else workers)]
    addresses = [a for a in addresses if a]
    if layout == "copies" and not addresses:
        raise FleetguiError("layout='copies' puts a copy on each worker: give workers=[...]")
    stages = 1 if layout == "copies" else 1 + len(addresses)
    export = await asyncio.to_thread(_export_of, Path(source), stages, weights)
    draft_source = parse_draft(str(draft)) if draft is not None else None
    stage = StageConfig(threads=threads, precision=precision)
    local = LocalPipelineConfig(stage=stage, draft_stage=stage)
    if not addresses:
        runtime = await asyncio.to_thread(
            load_local_pipeline, export, draft_dir=draft_source, config=local
        )
        return LLMPipeline(runtime, (), max_streams)
    from fleetgui.fleet.open_fleet import open_fleet, parse_worker_list, resolve_workers
    from fleetgui.fleet.replicas import open_copies
    from fleetgui.fleet.session_config import CoordinatorConfig
    from fleetgui.net.keys import coordinator_identity, load_identity

    pair = load_identity(Path(identity)) if identity else coordinator_identity()
    config = CoordinatorConfig(local=local, worker_threads=threads, worker_precision=precision)
    parsed = parse_worker_list(",".join(addresses))
    if layout == "copies":
        endpoints = await resolve_workers(parsed)
        groups = [[endpoint] for endpoint in endpoints]
        copies = await open_copies(export, groups, pair, config, draft_dir=draft_source)
        return LLMPipeline(copies, (), max_streams)
    session = await open_fleet(export, parsed, pair, config)
    try:
        runtime = await session.open_pipeline(draft_dir=draft_source)
    except BaseException:
        await session.close()
        raise
    return LLMPipeline(runtime, (session,), max_streams)


def open(
    source: str | Path,
    *,
    workers: Sequence[str] | str = (),
    draft: str | Path | None = None,
    layout: Layout = "pipeline",
    max_streams: int = 4,
    weights: str = "int4",
    identity: str | Path | None = None,
    threads: int = 0,
    precision: str = "auto",
) -> LLMPipeline:
    """Open a model for generating, on this PC or on a fleet.

    ``source``: an export folder (``fleetgui export``), or a model to export first into the
    shard cache (a GGUF file, a HuggingFace folder or hub id; reused on the next open).

    ``workers``: ``["HOST:PORT", ...]`` (or one comma-separated string) of paired workers
    (``fleetgui worker --pair``). None: every stage runs here. With ``layout="pipeline"`` this
    PC runs the first stage and each worker the next one, in order; with ``layout="copies"``
    each worker holds a whole copy and each generation runs on the least busy copy.

    ``draft``: a draft model's export, or ``"ngram"`` to draft from the text itself; then
    ``GenerationConfig(k=...)`` decodes speculatively. ``max_streams``: generations run at once
    (interleaved across the stages); more wait. ``weights``: the format a model is exported
    with (int4, int8, fp16, fp32). ``identity``: a coordinator key folder (default: the one in
    the OS keyring). ``threads``/``precision``: OpenVINO settings of every stage.

    Example::

        import fleetgui

        with fleetgui.open("shards/llama8b", workers=["192.168.1.20:5555"]) as llm:
            print(llm.chat([{"role": "user", "content": "Why is the sky blue?"}]))
            for text in llm.stream("def quicksort(items):", max_new_tokens=64):
                print(text, end="", flush=True)
    """
    thread = _LoopThread()
    try:
        pipeline = thread.run(
            aopen(
                source,
                workers=workers,
                draft=draft,
                layout=layout,
                max_streams=max_streams,
                weights=weights,
                identity=identity,
                threads=threads,
                precision=precision,
            )
        )
    except BaseException:
        thread.stop()
        raise
    pipeline._thread = thread
    return pipeline
