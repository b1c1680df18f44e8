"""Ceilings: how fast a run could have gone if only the models' own passes took time.

A benchmark times each pass with a bare loop (:mod:`bare_loop`) in the same run as the
pipeline and sets the ceiling beside the measured figure. The gap between the two is what the
coordinator, the messages and the scheduling cost; a target above the ceiling is out of reach
of any coordinator on the machine the figures came from.

The model: each stream is a chain of rounds; a round is work items done in order, each on one
resource (a core: the coordinator's PC, a worker's PC). A resource does one item at a time and
a stream's items cannot overlap. So no schedule finishes before the busiest resource has done
all its work, nor before the longest stream has done all of its: the larger of the two is a
lower bound on the wall time. Pure functions, no OpenVINO.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass


@dataclass(frozen=True)
class Work:
    """``ms`` of work on ``resource`` (a core)."""

    resource: str
    ms: float


Round = Sequence[Work]


def wall_floor_ms(streams: Sequence[Sequence[Round]]) -> float:
    """The least wall time in which ``streams`` (each a sequence of rounds) can all finish."""
    busy: defaultdict[str, float] = defaultdict(float)
    longest = 0.0
    for rounds in streams:
        chain = 0.0
        for work in (item for one_round in rounds for item in one_round):
            if work.ms < 0:
                raise ValueError(f"negative work: {work}")
            busy[work.resource] += work.ms
            chain += work.ms
        longest = max(longest, chain)
    return max([longest, *busy.values()])


def ceiling_tok_s(streams: Sequence[Sequence[Round]], tokens: int) -> float:
    """The most tokens a second ``streams`` could produce, ``tokens`` of them in all."""
    floor = wall_floor_ms(streams)
    if floor <= 0:
        raise ValueError("the streams hold no work")
    return tokens * 1000.0 / floor


def speculative_rounds(
    rounds: Sequence[tuple[int, int]],
    draft_ms: float,
    verify_ms: dict[int, Sequence[tuple[str, float]]],
    *,
    drafter: str = "coordinator",
) -> tuple[list[list[Work]], int]:
    """One stream's speculative rounds as work, and the tokens they produced.

    ``rounds``: each round's (K, accepted drafts); ``draft_ms``: one draft pass (K a round, on
    ``drafter``); ``verify_ms[K + 1]``: the verify pass of K + 1 positions as (resource, ms) per
    stage, in ring order. A round yields its accepted drafts plus the target's own token."""
    work: list[list[Work]] = []
    tokens = 0
    for k, accepted in rounds:
        if not 0 <= accepted <= k:
            raise ValueError(f"a round of K={k} cannot accept {accepted} drafts")
        if k + 1 not in verify_ms:
            raise ValueError(f"no verify timing for {k + 1} positions")
        work.append([Work(drafter, k * draft_ms), *(Work(r, ms) for r, ms in verify_ms[k + 1])])
        tokens += accepted + 1
    return work, tokens
