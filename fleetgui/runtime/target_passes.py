"""A stream's passes through the target model's route: chunked passes that bring its cache to
the committed tokens (plus a round's drafts), and the plain decode path as one chained run."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncGenerator, Callable

import numpy as np

from fleetgui.runtime.metrics import MetricsBus, StageTiming
from fleetgui.runtime.route import DecodeRun, Route
from fleetgui.runtime.sequence import CompactionPolicy
from fleetgui.runtime.stage import ForwardRequest, ForwardResult, HeadOp
from fleetgui.runtime.stream_state import StreamState

#: Prompt tokens a prefill pass carries while other streams generate: each of their tokens
#: waits for the pass ahead of it on a stage, and a 256-token pass holds a stage about six
#: times as long as a 64-token one (docs/performance.md, bench_stage_batch.py).
SHARED_PREFILL_CHUNK = 64


class TargetPasses:
    """Runs streams' passes through ``route`` and reports each stage's time of each pass."""

    def __init__(
        self,
        route: Route,
        metrics: MetricsBus,
        *,
        context_limit: int,
        prefill_chunk: int,
        compaction: CompactionPolicy,
        stop_ids: frozenset[int],
        streams: Callable[[], int] = lambda: 1,
    ) -> None:
        """``stop_ids``: the tokens (EOS) that end a plain decode run early; ``streams``: how
        many streams generate now (this one included)."""
        self.route = route
        self.metrics = metrics
        self.context_limit = context_limit
        self.prefill_chunk = prefill_chunk
        self.compaction = compaction
        self.stop_ids = stop_ids
        self.streams = streams

    def chunk_size(self) -> int:
        """Prompt tokens in the next prefill pass: the full chunk alone; beside other streams
        a small one, since each of their steps waits for the pass ahead of it on a stage (a
        long prompt then takes a little longer, and nobody waits seconds a token)."""
        if self.streams() > 1:
            return min(self.prefill_chunk, SHARED_PREFILL_CHUNK)
        return self.prefill_chunk

    async def run(self, stream: StreamState, drafts: list[int], head: HeadOp) -> ForwardResult:
        """Bring the target's cache to the committed tokens plus ``drafts``; run ``head``."""
        rewind, pending = stream.target.plan(stream.committed)
        feed = pending + drafts
        if not feed:  # a resumed stream's cache holds the whole prompt: its last token again
            rewind, feed = rewind + 1, stream.committed[-1:]
        keep, stream.keep = stream.keep, None
        result = ForwardResult(stream.id)
        start = 0
        while start < len(feed):
            chunk = feed[start : start + self.chunk_size()]
            start += len(chunk)
            last = start >= len(feed)
            stream.target.applied(rewind, [])
            compact = stream.compact_first or self.compaction.should_compact(
                stream.target, len(chunk), self.context_limit
            )
            stream.compact_first = False
            result = await self.route.run(
                ForwardRequest(
                    stream.id,
                    np.array([chunk], dtype=np.int64),
                    rewind=rewind,
                    compact=compact,
                    head=head if last else None,
                    keep=keep,
                )
            )
            keep = None
            stream.step_logprobs = result.logprobs
            if compact:
                stream.target.compacted()
            stream.target.applied(0, chunk)
            rewind = 0
            self._emit_stage_timings(stream.id, result, len(chunk))
        return result

    async def decode_run(self, stream: StreamState) -> AsyncGenerator[list[int], None]:
        """Plain decode steps as one run the route chains itself (no trip through the
        generation loop between two tokens), up to the token limit and the context."""
        rewind, pending = stream.target.plan(stream.committed)
        if rewind or len(pending) != 1:
            raise RuntimeError(f"stream {stream.id}: the cache is not one token behind")
        run = DecodeRun(
            stream.id,
            pending[0],
            steps=min(
                stream.config.max_new_tokens - len(stream.generated),
                stream.room(self.context_limit),
            ),
            next_head=stream.plain_head,
            stop_ids=self.stop_ids,
        )
        fed = pending[0]
        async with contextlib.aclosing(self.route.decode(run)) as results:
            async for result in results:
                stream.target.applied(0, [fed])
                self._emit_stage_timings(stream.id, result, 1)
                if result.tokens:
                    fed = result.tokens[-1]
                yield result.tokens

    def _emit_stage_timings(self, stream_id: int, result: ForwardResult, positions: int) -> None:
        for stage, ms in sorted(result.compute_ms.items()):
            self.metrics.emit(StageTiming(stream_id, stage, ms, positions))
