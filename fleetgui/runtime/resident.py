"""Conversations that stay on the fleet: the KV state a finished generation leaves on every stage,
kept for the next request that continues it.

A stream whose generation ended at a token boundary is parked here with what its caches hold (a
:class:`~fleetgui.runtime.sequence.FedTokens`) and how long its last prompt was. A request that
continues a conversation (its prompt holds the stream's whole last prompt; the answer after it
may come back tokenized otherwise) takes its idle stream (:meth:`ResidentStreams.take`): its
caches are rewound to the shared prefix and only the rest of the prompt is prefilled. A request
that only starts as an idle stream does (one system prompt, tool list or document for many
conversations, or a conversation with an earlier message edited) starts a new stream from a copy
of that prefix instead (:meth:`ResidentStreams.lend`), so the stream that holds it keeps its
cache. Matching is on token ids, so any client that resends its history (the app's chat, an
OpenAI client, an agent) continues where it left off. A stream in use is never here, so no two
requests share one.

Idle streams beyond the budget (KV entries of all idle streams together) are evicted least
recently used first; the caller frees them on every stage. An evicted conversation is simply
prefilled again when it returns.
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from fleetgui.runtime.sequence import FedTokens

if TYPE_CHECKING:
    from fleetgui.runtime.speculative import Drafter

#: The shortest shared prefix worth taking or copying an idle stream for: a few tokens (a
#: template's opening) save next to nothing.
MIN_PREFIX = 16


@dataclass
class ParkedStream:
    """An idle stream and what its caches hold."""

    stream_id: int
    target: FedTokens  # the target's caches, on every stage alike
    drafter: Drafter | None = None  # the drafter holding state for the stream (None: none)
    # the caches hold exactly ``target``'s entries; else a decode run computed steps ahead that
    # nobody read (it was stopped early), and the next request drops them (compacts)
    exact: bool = True
    prompt_tokens: int = 0  # its last request's prompt: a request holding all of it continues it
    last_used: int = field(default=0, compare=False)

    @property
    def entries(self) -> int:
        """KV entries the stream holds on each stage (live and masked)."""
        return self.target.entries


def common_prefix(a: Sequence[int], b: Sequence[int]) -> int:
    """How many leading tokens ``a`` and ``b`` share."""
    n = 0
    for x, y in zip(a, b, strict=False):
        if x != y:
            break
        n += 1
    return n


class ResidentStreams:
    """The idle streams of one pipeline (see module doc)."""

    def __init__(self, budget_entries: int | None = None, min_prefix: int = MIN_PREFIX) -> None:
        """``budget_entries``: KV entries all idle streams may hold together (None: no
        limit)."""
        self.budget_entries = budget_entries
        self.min_prefix = min_prefix
        self._idle: dict[int, ParkedStream] = {}
        self._clock = itertools.count(1)

    def idle(self) -> list[ParkedStream]:
        """The idle streams, least recently used first."""
        return sorted(self._idle.values(), key=lambda p: p.last_used)

    @property
    def idle_entries(self) -> int:
        return sum(p.entries for p in self._idle.values())

    def shared_prefix(self, prompt_ids: Sequence[int]) -> int:
        """The longest prefix ``prompt_ids`` share with an idle stream (0: none worth taking),
        without taking it."""
        best = max(
            (common_prefix(p.target.fed, prompt_ids) for p in self._idle.values()), default=0
        )
        return best if best >= min(self.min_prefix, len(prompt_ids)) else 0

    def take(self, prompt_ids: Sequence[int]) -> tuple[ParkedStream, int] | None:
        """The idle stream ``prompt_ids`` continue and the prefix they share, no longer idle:
        of the streams whose whole last prompt they hold, the one with the longest shared
        prefix (the most recently used of equals), of at least ``min_prefix`` tokens (or the
        whole prompt, if shorter). None when no stream qualifies."""
        found = self._best(prompt_ids, continuing=True)
        if found is not None:
            del self._idle[found[0].stream_id]
        return found

    def lend(self, prompt_ids: Sequence[int]) -> tuple[ParkedStream, int] | None:
        """The idle stream sharing the longest prefix of at least ``min_prefix`` tokens with
        ``prompt_ids``, and that prefix's length, out of the pool while a new stream copies the
        prefix (so that no budget evicts it meanwhile); :meth:`park` it again after."""
        found = self._best(prompt_ids, continuing=False)
        if found is not None:
            del self._idle[found[0].stream_id]
        return found

    def _best(
        self, prompt_ids: Sequence[int], *, continuing: bool
    ) -> tuple[ParkedStream, int] | None:
        best: ParkedStream | None = None
        best_n = 0
        for parked in self._idle.values():
            n = common_prefix(parked.target.fed, prompt_ids)
            if continuing and n < min(parked.prompt_tokens, len(parked.target.fed)):
                continue  # it diverges inside that conversation: copied, not taken
            if n > best_n or (
                n == best_n and best is not None and parked.last_used > best.last_used
            ):
                best, best_n = parked, n
        # a short prompt may continue a stream whole; a copy is only worth a long prefix
        shortest = min(self.min_prefix, len(prompt_ids)) if continuing else self.min_prefix
        if best is None or best_n < shortest:
            return None
        return best, best_n

    def park(self, parked: ParkedStream) -> list[ParkedStream]:
        """Keep ``parked`` for a later request; the streams the budget evicts for it (the
        caller frees them on every stage)."""
        parked.last_used = next(self._clock)
        self._idle[parked.stream_id] = parked
        return self._over_budget()

    def set_budget(self, budget_entries: int | None) -> list[ParkedStream]:
        """Change the budget; the streams it now evicts."""
        self.budget_entries = budget_entries
        return self._over_budget()

    def drain(self) -> list[ParkedStream]:
        """Every idle stream, no longer kept (reuse turned off, or the pipeline closing)."""
        out, self._idle = list(self._idle.values()), {}
        return out

    def _over_budget(self) -> list[ParkedStream]:
        evicted: list[ParkedStream] = []
        if self.budget_entries is None:
            return evicted
        for parked in self.idle():  # least recently used first
            if self.idle_entries <= self.budget_entries:
                break
            evicted.append(self._idle.pop(parked.stream_id))
        return evicted
