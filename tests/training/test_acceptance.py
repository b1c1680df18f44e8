"""Block acceptance (``fleetgui.training.acceptance``): greedy speculation simulated on a row of
draft/target agreements."""

from __future__ import annotations

import pytest

from fleetgui.training.acceptance import block_acceptance


@pytest.mark.parametrize(
    ("matches", "k", "expected"),
    [
        # 4 accepted + the target's own token, then the 3 left are proposed and accepted
        ([True] * 8, 4, (7, 7, 2)),
        # every block of 2 is rejected at once; the target advances 1 token per step
        ([False] * 4, 2, (0, 7, 4)),
        ([True, False, True, True], 2, (3, 4, 2)),
        ([True, True, False, True, True, True], 3, (5, 6, 2)),
        ([True, True, True], 1, (2, 2, 2)),
    ],
)
def test_block_acceptance_simulates_greedy_speculation(
    matches: list[bool], k: int, expected: tuple[int, int, int]
) -> None:
    assert block_acceptance(matches, k) == expected
