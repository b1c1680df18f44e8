"""Several independent replicas of one model behind one pipeline: whole copies, or pipelines
over disjoint groups of workers, each its own :class:`~fleetgui.fleet.session.session.FleetSession`.

When every PC can hold the model, a whole copy per PC serves users without paying a hop per
token; users are spread over the replicas. Each new stream goes to the replica with the fewest
tokens still to generate (its streams' ``max_new_tokens`` less what they have produced), and
stays there: its KV cache lives on that replica only. A request that continues a conversation
goes back to the replica that keeps its KV, unless that one runs :data:`FAR_BUSIER` more
streams than the least busy.

When a replica fails mid-reply (a worker lost and no spare in its group), the stream is run
again from its prompt on another replica and the text already sent is not sent twice. An unseeded
sampled stream is given a seed first, so a replay draws the same tokens; greedy streams replay
identically anyway, since every replica computes with the same export and pass shapes.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import secrets
from collections.abc import AsyncGenerator, Sequence
from dataclasses import dataclass, replace

from fleetgui.errors import FleetguiError
from fleetgui.fleet.session.session import FleetSession
from fleetgui.generation_config import GenerationConfig
from fleetgui.runtime.generation import (
    GenerationError,
    GenerationResult,
    TokenDelta,
    final_result,
)
from fleetgui.runtime.metrics import MetricsBus
from fleetgui.runtime.pipeline import Pipeline
from fleetgui.runtime.speculative import Drafter
from fleetgui.runtime.stream_limit import StreamLimit
from fleetgui.runtime.tokenizer import Tokenizer

log = logging.getLogger(__name__)

#: A replica running this many more streams than the least busy one gets a returning
#: conversation's request anyway, prefill and all: waiting behind them would cost more.
FAR_BUSIER = 2


class NoReplicaLeftError(FleetguiError):
    """Every replica has failed; the message says which and why."""


@dataclass
class Replica:
    """One replica (a whole copy on one worker, or a pipeline) and the work it has in hand."""

    name: str  # e.g. "a" for a copy on worker a, "a+b" for a pipeline over a and b
    session: FleetSession
    pipeline: Pipeline
    outstanding: int = 0  # tokens its running streams may still generate
    streams: int = 0  # streams running on it now
    served: int = 0  # streams it has started, in all
    failed: str | None = None  # why it stopped serving, or None

    def kept_prefix(self, prompt_ids: Sequence[int]) -> int:
        """How much of ``prompt_ids`` an idle conversation on this replica keeps."""
        resident = self.pipeline.resident
        return resident.shared_prefix(prompt_ids) if resident is not None else 0


class ReplicatedPipeline:
    """Generates on the least loaded of several replicas (see module doc). Offers what callers
    use of a :class:`~fleetgui.runtime.pipeline.Pipeline`: ``complete``, ``stream``,
    ``tokenizer``, ``context_limit``, ``draft``, ``metrics`` and ``close``."""

    def __init__(self, replicas: Sequence[Replica], max_streams: int | None = None) -> None:
        if not replicas:
            raise FleetguiError("a replicated pipeline needs at least one replica")
        self.replicas = list(replicas)
        first = self.replicas[0].pipeline
        self.tokenizer: Tokenizer = first.tokenizer
        self.context_limit: int = min(r.pipeline.context_limit for r in self.replicas)
        self.draft: Drafter | None = (
            first.draft if all(r.pipeline.draft for r in replicas) else None
        )
        self.metrics = MetricsBus()
        for replica in self.replicas:  # one bus for the dashboard, whichever replica ran it
            replica.pipeline.metrics.subscribe(self.metrics.emit)
        self.replays = 0  # streams run again after their replica failed
        self.streams = StreamLimit(max_streams)  # generations at once, over all replicas

    def streams_by_replica(self) -> dict[str, int]:
        """Streams running on each replica now (the dashboard's 'who serves what')."""
        return {r.name: r.streams for r in self.replicas}

    def _pick(self, exclude: set[str], prompt_ids: Sequence[int] = ()) -> Replica:
        usable = [r for r in self.replicas if r.failed is None and r.name not in exclude]
        if not usable:
            why = "; ".join(f"{r.name}: {r.failed or 'tried'}" for r in self.replicas)
            raise NoReplicaLeftError(f"no replica of the model is left to serve: {why}")
        least = min(usable, key=lambda r: (r.outstanding, r.streams))
        kept = [(r.kept_prefix(prompt_ids), r) for r in usable if prompt_ids]
        n, holder = max(kept, key=lambda k: k[0], default=(0, least))
        if n and holder.streams < least.streams + FAR_BUSIER:
            return holder  # its KV saves the prefill: worth a little waiting
        return least

    async def complete(self, prompt: str, config: GenerationConfig) -> GenerationResult:
        """Generate a whole answer to ``prompt`` on one replica (another if it fails)."""
        return await final_result(self.stream(prompt, config))

    async def stream(
        self, prompt: str, config: GenerationConfig
    ) -> AsyncGenerator[TokenDelta | GenerationResult, None]:
        """Text deltas, then the result, as :meth:`Pipeline.stream` gives them; a replica that
        fails mid-reply hands the stream to another, which replays it (see module doc). Waits
        for a slot (``streams``) first."""
        async with (
            self.streams.slot(),
            contextlib.aclosing(self._stream(prompt, config)) as items,
        ):
            async for item in items:
                yield item

    async def _stream(
        self, prompt: str, config: GenerationConfig
    ) -> AsyncGenerator[TokenDelta | GenerationResult, None]:
        if not config.greedy and config.seed is None:
            seed = secrets.randbits(63)  # so that a replay samples the same tokens
            config = replace(config, seed=seed)
        sent = ""  # text the caller has had
        tried: set[str] = set()
        prompt_ids = await asyncio.to_thread(self.tokenizer.encode, prompt)  # may run a model
        while True:
            replica = self._pick(tried, prompt_ids)
            tried.add(replica.name)
            replica.outstanding += config.max_new_tokens
            replica.streams += 1
            replica.served += 1
            produced, text = 0, ""
            try:
                async with contextlib.aclosing(replica.pipeline.stream(prompt, config)) as items:
                    async for item in items:
                        if isinstance(item, GenerationResult):
                            yield item
                            return
                        produced += len(item.token_ids)
                        replica.outstanding -= len(item.token_ids)
                        text += item.text
                        if len(text) > len(sent):  # a replay sends only what is new
                            if not text.startswith(sent):
                                log.warning("replica %s replayed other text", replica.name)
                            new, sent = text[len(sent) :], text
                            yield TokenDelta(item.stream_id, new, item.token_ids)
            except GenerationError:
                raise  # the request itself is wrong: another replica would refuse it too
            except FleetguiError as exc:
                replica.failed = str(exc)
                self.replays += 1
                log.warning(
                    "replica %s failed (%s); replaying the stream on another (%d characters sent)",
                    replica.name,
                    exc,
                    len(sent),
                )
            finally:
                replica.outstanding -= config.max_new_tokens - produced
                replica.streams -= 1

    async def close(self) -> None:
        """Free every replica's stages here (their sessions are closed by whoever opened
        them: :meth:`LLMPipeline.aclose <fleetgui.llm_pipeline.LLMPipeline.aclose>`)."""
        for replica in self.replicas:
            with contextlib.suppress(Exception):
                await replica.pipeline.close()
