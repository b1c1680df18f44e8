"""The cost simulator of the K auto tests (``test_auto_k*.py``): what a speculative round costs at
each K as the pipeline times it, and the pace that gives at a known per-token acceptance rate."""

from __future__ import annotations

from dataclasses import dataclass, replace

from fleetgui.generation_config import K_MAX, K_MIN


@dataclass(frozen=True)
class Costs:
    """A round's costs in ms. The proposal: ``fixed`` (hand-offs, and with ``first_in_fixed``
    the first draft pass too) plus ``step`` a draft pass (a pass after the first one when
    ``fixed`` holds that). The verify pass: ``verify`` (the target's step) plus ``position`` a
    verified position, after the network's ``wait``. A plain step (K 0) verifies one position."""

    fixed: float
    step: float
    verify: float
    position: float
    wait: float = 0.0
    first_in_fixed: bool = True

    def draft_ms(self, k: int) -> float:
        return self.fixed + self.step * (k - 1 if self.first_in_fixed else k)

    def compute_ms(self, k: int) -> float:
        return self.verify + self.position * (k + 1)

    def verify_ms(self, k: int) -> float:
        return self.wait + self.compute_ms(k)

    def round_ms(self, k: int) -> float:
        return self.draft_ms(k) + self.verify_ms(k)

    @property
    def plain_ms(self) -> float:
        return self.verify_ms(0)

    def at_hop(self, hop_ms: float) -> Costs:
        """The same pair with ``hop_ms`` on each of a verify's 3 hops."""
        return replace(self, wait=3 * hop_ms)


#: As measured on the demo fleet (small pair, target on 2 workers, draft on the coordinator): a
#: proposal ~1.5 ms whatever K plus ~0.8 ms a draft, a verify ~8.4 ms plus ~0.3 ms a position.
DEMO = Costs(fixed=1.5 + 0.8, step=0.8, verify=8.4, position=0.3)


def expected_tokens(k: int, a: float) -> float:
    """Tokens a round at K makes when each draft is accepted with probability ``a``."""
    return (1 - a ** (k + 1)) / (1 - a)


def tokens_per_ms(k: int, a: float, costs: Costs) -> float:
    """Expected tokens per ms at a fixed K."""
    return expected_tokens(k, a) / costs.round_ms(k)


def best_k(a: float, costs: Costs) -> int:
    return max(range(K_MIN, K_MAX + 1), key=lambda k: tokens_per_ms(k, a, costs))
