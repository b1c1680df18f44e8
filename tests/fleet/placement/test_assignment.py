"""Failing over several workers lost at once (``fleet.placement.assignment``): pure functions over
plain data. The fleet's failover tests (``tests/fleet/session/test_failover.py``) kill real
workers; these pin down what memory each PC has left between two losses, which real tiny models
never run short of."""

from __future__ import annotations

import pytest

from fleetgui.fleet.placement.assignment import (
    Assignment,
    Member,
    StageToPlace,
    UnplacedStagesError,
    failover_all,
    need_bytes,
    size_text,
    stages_text,
)
from fleetgui.shard import even_split

UNITS = [StageToPlace(i, s, 400_000) for i, s in enumerate(even_split("m", 8, 4))]  # 2 layers each
ONE = need_bytes(UNITS, [1])  # what one stage needs (weights plus overhead)


def test_two_lost_workers_cannot_both_be_given_a_neighbours_memory() -> None:
    """b and c lost at once, a has room for one stage: a takes b's, and c's has nowhere to go
    (without counting b's stage against a's memory, a was given both)."""
    ring = Assignment((0,), (Member("a", (1,)), Member("b", (2,)), Member("c", (3,))))
    with pytest.raises(UnplacedStagesError) as raised:
        failover_all(ring, UNITS, ["b", "c"], {"a": ONE})
    assert raised.value.stages == (3,)
    assert raised.value.free_bytes == {"a": 0}
    assert raised.value.coordinator_free_bytes is None  # stage 3 does not follow its stage 0
    both = failover_all(ring, UNITS, ["b", "c"], {"a": 2 * ONE})
    assert both == Assignment((0,), (Member("a", (1, 2, 3)),))


def test_the_coordinator_takes_the_stages_of_both_workers_while_its_memory_lasts() -> None:
    ring = Assignment((0,), (Member("a", (1,)), Member("b", (2,))))
    assert failover_all(ring, UNITS[:3], ["a", "b"], {}, coordinator_free_bytes=2 * ONE) == (
        Assignment((0, 1, 2), ())
    )
    with pytest.raises(UnplacedStagesError) as raised:
        failover_all(ring, UNITS[:3], ["a", "b"], {}, coordinator_free_bytes=ONE)
    assert raised.value.stages == (2,) and raised.value.coordinator_free_bytes == 0
    with pytest.raises(UnplacedStagesError) as raised:  # it may not take any: both are listed
        failover_all(ring, UNITS[:3], ["a", "b"], {})
    assert raised.value.stages == (1, 2) and raised.value.coordinator_free_bytes == 0


def test_messages_name_stages_with_their_layers_and_sizes_readably() -> None:
    assert stages_text(UNITS, [2]) == "stage 2 (layers 4-5)"
    assert stages_text(UNITS, [2, 1]) == "stages 1-2 (layers 2-5)"
    assert stages_text(UNITS, [1, 3]) == "stages 1, 3"
    assert size_text(800_000) == "0.8 MB"  # not "0.00 GB"
    assert size_text(1_250_000_000) == "1.25 GB"
