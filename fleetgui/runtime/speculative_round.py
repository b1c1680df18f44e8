"""A speculative decoding step of one stream: the drafter proposes K tokens and the target
verifies them in one pass, or, when K auto turns speculation off or nothing is proposed, a
plain step timed for K auto's comparison."""

from __future__ import annotations

import time

from fleetgui.generation_config import GenerationConfig
from fleetgui.runtime.metrics import SpeculationRound
from fleetgui.runtime.speculative import Drafter, Proposal
from fleetgui.runtime.stage import HeadOp, VerifyGreedyHead, VerifySampleHead
from fleetgui.runtime.stream_state import StreamState
from fleetgui.runtime.target_passes import TargetPasses
from fleetgui.runtime.verification import uniforms_for_round


async def speculative_step(
    stream: StreamState, target: TargetPasses, drafter: Drafter, *, streams: int
) -> list[int]:
    """The tokens of one round (or plain step) of ``stream``; ``streams``: how many streams
    are generating now (K auto holds K steadier with several)."""
    config = stream.config
    auto = stream.auto_k
    probe = config.auto_k and auto.off  # a round now probes speculation again
    if isinstance(config.k, int):
        k = config.k
    else:  # OFF (0) while speculation does not pay: a plain step
        predictable = probe and drafter.predictable(stream.id, stream.committed)
        k = auto.choose(streams, predictable=predictable)
    k = min(
        k,
        config.max_new_tokens - len(stream.generated),
        stream.room(target.context_limit) - 1,
    )
    if k < 1:
        return await plain_step(stream, target)
    started = time.perf_counter()
    proposal = await drafter.propose(stream.id, stream.committed, k, config, stream.rng)
    # the proposal's wall time: a hand-off to a thread and back costs the round too
    draft_ms = (time.perf_counter() - started) * 1000
    if not proposal.drafts:  # e.g. no n-gram match: nothing to verify, not a round
        return await plain_step(stream, target)
    k = len(proposal.drafts)  # a drafter may propose fewer than asked
    head = _verify_head(config, proposal, stream)
    started = time.perf_counter()
    result = await target.run(stream, proposal.drafts, head)
    verify_ms = (time.perf_counter() - started) * 1000
    stream.drafted += k
    stream.accepted += result.accepted
    stream.ks.append(k)
    # a stream's first round also warms its fresh state up, and a probe's draft model
    # catches up on the plain steps' tokens: their times would mark K as dear
    timed = len(stream.ks) > 1 and not probe
    compute = sum(result.compute_ms.values()) if result.compute_ms else None
    stream.auto_k.update(
        k,
        result.accepted,
        draft_ms,
        verify_ms,
        timed=timed,
        compute_ms=compute,
        pass_ms=proposal.pass_ms,
    )
    target.metrics.emit(SpeculationRound(stream.id, k, result.accepted, proposal.ms, verify_ms))
    return result.tokens


async def plain_step(stream: StreamState, target: TargetPasses) -> list[int]:
    """One plain decoding step in speculative mode, timed for K auto's comparison."""
    started = time.perf_counter()
    result = await target.run(stream, [], stream.plain_head())
    stream.auto_k.record_plain((time.perf_counter() - started) * 1000)
    stream.plain_steps += 1
    return result.tokens


def _verify_head(config: GenerationConfig, proposal: Proposal, stream: StreamState) -> HeadOp:
    """The head that judges ``proposal``'s drafts: greedy, or speculative sampling with this
    round's uniforms (drawn from the stream's generator after the proposal's); with the
    grammar's masks along the drafts when the answer is constrained."""
    drafts = tuple(proposal.drafts)
    mask = stream.constraint.mask(drafts) if stream.constraint is not None else None
    if config.greedy:
        return VerifyGreedyHead(drafts, mask, config.logprobs)
    u_accept, u_resample = uniforms_for_round(stream.rng, len(drafts))
    return VerifySampleHead(
        config,
        drafts,
        tuple(proposal.dists),
        tuple(float(u) for u in u_accept),
        float(u_resample),
        mask,
        config.logprobs,
    )
