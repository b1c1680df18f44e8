"""The benchmarks' ceiling arithmetic (benchmarks/ceilings.py): the floor on wall time that the
busiest core and the longest stream set."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))

from ceilings import Work, ceiling_tok_s, speculative_rounds, wall_floor_ms


def token(s0: float, s1: float) -> list[Work]:
    return [Work("core0", s0), Work("core1", s1)]


def test_one_stream_is_bound_by_its_chain() -> None:
    stream = [token(8.0, 9.0) for _ in range(10)]
    assert wall_floor_ms([stream]) == pytest.approx(170.0)
    assert ceiling_tok_s([stream], 10) == pytest.approx(10 * 1000 / 170)


def test_two_streams_are_bound_by_the_busier_core() -> None:
    # 2 streams of 10 tokens over stages of 8 and 9 ms: core1 works 180 ms, a chain lasts 170
    streams = [[token(8.0, 9.0) for _ in range(10)] for _ in range(2)]
    assert wall_floor_ms(streams) == pytest.approx(180.0)
    one = ceiling_tok_s(streams[:1], 10)
    two = ceiling_tok_s(streams, 20)
    assert two / one == pytest.approx(17 / 9)  # (s0 + s1) / max(s0, s1)


def test_balanced_stages_allow_twice_the_rate_and_no_more() -> None:
    streams = [[token(5.0, 5.0) for _ in range(4)] for _ in range(3)]
    assert ceiling_tok_s(streams, 12) / ceiling_tok_s(streams[:1], 4) == pytest.approx(2.0)


def test_speculative_rounds_put_the_draft_and_the_verify_on_their_cores() -> None:
    verify = {5: [("worker", 2.5)], 3: [("worker", 1.5)]}
    work, tokens = speculative_rounds([(4, 3), (4, 4), (2, 0)], 0.5, verify)
    assert tokens == (3 + 1) + (4 + 1) + (0 + 1)
    assert [[(w.resource, w.ms) for w in r] for r in work] == [
        [("coordinator", 2.0), ("worker", 2.5)],
        [("coordinator", 2.0), ("worker", 2.5)],
        [("coordinator", 1.0), ("worker", 1.5)],
    ]
    # two such streams: the worker does 13 ms, the coordinator 10, a stream 11.5
    assert wall_floor_ms([work, work]) == pytest.approx(13.0)


def test_a_stage_on_the_drafting_core_adds_to_its_work() -> None:
    verify = {5: [("coordinator", 1.0), ("worker", 1.5)]}
    work, _ = speculative_rounds([(4, 2)] * 10, 0.5, verify)
    assert wall_floor_ms([work, work]) == pytest.approx(2 * 10 * (2.0 + 1.0))


@pytest.mark.parametrize(
    ("rounds", "verify", "message"),
    [
        ([(4, 5)], {5: [("worker", 1.0)]}, "cannot accept 5"),
        ([(4, -1)], {5: [("worker", 1.0)]}, "cannot accept -1"),
        ([(3, 1)], {5: [("worker", 1.0)]}, "no verify timing for 4"),
    ],
)
def test_impossible_rounds_are_refused(
    rounds: list[tuple[int, int]], verify: dict[int, list[tuple[str, float]]], message: str
) -> None:
    with pytest.raises(ValueError, match=message):
        speculative_rounds(rounds, 0.5, verify)


def test_no_work_has_no_ceiling() -> None:
    with pytest.raises(ValueError, match="no work"):
        ceiling_tok_s([[]], 0)
    with pytest.raises(ValueError, match="negative"):
        wall_floor_ms([[[Work("core0", -1.0)]]])
