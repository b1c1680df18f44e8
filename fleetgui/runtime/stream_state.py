"""One stream's state on the coordinator: its tokens so far, what the target's cache holds,
and its speculation tallies."""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import dataclass, field

import numpy as np

from fleetgui.generation_config import GenerationConfig
from fleetgui.runtime.auto_k import AutoK
from fleetgui.runtime.constraint import TokenConstraint
from fleetgui.runtime.generation import FinishReason
from fleetgui.runtime.sequence import FedTokens
from fleetgui.runtime.stage import GreedyHead, HeadOp, SampleHead
from fleetgui.runtime.token_logprobs import TokenLogprob


@dataclass
class StreamState:
    id: int
    prompt_ids: list[int]
    config: GenerationConfig
    rng: np.random.Generator
    target: FedTokens = field(default_factory=FedTokens)
    committed: list[int] = field(default_factory=list)
    drafted: int = 0
    accepted: int = 0
    ks: list[int] = field(default_factory=list)
    plain_steps: int = 0
    auto_k: AutoK = field(default_factory=AutoK)
    # the first pass keeps the entries ``target`` holds and drops the rest: for a resident stream
    # taken up again, the steps a run computed ahead; for a new one, whatever an earlier user of
    # its id left (a pipeline dropped with streams resident, over the same stages)
    keep: int | None = 0
    compact_first: bool = True
    cached: int = 0  # prompt tokens whose KV was kept from an earlier request
    constraint: TokenConstraint | None = None  # a grammar the answer follows (structured output)
    logprobs: list[TokenLogprob] = field(default_factory=list)  # of ``generated``, when asked
    step_logprobs: tuple[TokenLogprob, ...] = ()  # of the last step's tokens, to commit

    @property
    def generated(self) -> list[int]:
        return self.committed[len(self.prompt_ids) :]

    def room(self, context_limit: int) -> int:
        """Positions left in a context of ``context_limit`` for this stream."""
        return context_limit - len(self.committed)

    def plain_head(self) -> HeadOp:
        """The head of a step without drafts: greedy, or sampling with the stream's next
        uniform."""
        config = self.config
        mask = self.constraint.mask() if self.constraint is not None else None
        if config.greedy:
            return GreedyHead(mask, config.logprobs)
        return SampleHead(config, float(self.rng.random()), mask, config.logprobs)

    @property
    def stepwise(self) -> bool:
        """Whether each step must come back to the coordinator before the next is sent: its
        grammar's mask follows the token before, or its log-probabilities are collected."""
        return self.constraint is not None or self.config.logprobs is not None

    def commit(
        self, tokens: list[int], eos_ids: Collection[int]
    ) -> tuple[list[int], FinishReason | None]:
        """Append ``tokens`` up to EOS and the token limit; the tokens taken and the finish
        reason (EOS, MAX_TOKENS, or None to go on). A constrained answer also ends, as at EOS,
        once its grammar is complete and allows nothing else."""
        taken: list[int] = []
        limit = self.config.max_new_tokens
        finish: FinishReason | None = None
        for token in tokens:
            if token in eos_ids:
                finish = FinishReason.EOS
                break
            taken.append(token)
            if len(self.generated) + len(taken) >= limit:
                finish = FinishReason.MAX_TOKENS
                break
        self.committed += taken
        if self.config.logprobs is not None:
            self.logprobs += self.step_logprobs[: len(taken)]
        if self.constraint is not None:
            self.constraint.accept(taken)
            if finish is None and self.constraint.done:
                finish = FinishReason.EOS
        return taken, finish
