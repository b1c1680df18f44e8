"""The Shard value and the layer-range parsing every export starts from."""

from __future__ import annotations

import dataclasses
import itertools

import pytest

from fleetgui.shard import Shard, even_split, parse_layer_ranges


def test_shard_properties() -> None:
    first, middle, last = Shard("m", 0, 3, 8), Shard("m", 3, 5, 8), Shard("m", 5, 8, 8)
    assert (first.is_first, first.is_last, first.n_stage_layers) == (True, False, 3)
    assert (middle.is_first, middle.is_last, middle.n_stage_layers) == (False, False, 2)
    assert (last.is_first, last.is_last, last.n_stage_layers) == (False, True, 3)
    whole = Shard("m", 0, 8, 8)
    assert whole.is_first and whole.is_last


def test_shard_is_frozen_and_hashable() -> None:
    shard = Shard("m", 0, 2, 4)
    with pytest.raises(dataclasses.FrozenInstanceError):
        shard.start_layer = 1  # type: ignore[misc]
    assert {shard, Shard("m", 0, 2, 4)} == {shard}


@pytest.mark.parametrize(("start", "end", "n"), [(-1, 2, 4), (2, 2, 4), (3, 2, 4), (0, 5, 4)])
def test_invalid_ranges_are_rejected(start: int, end: int, n: int) -> None:
    with pytest.raises(ValueError, match="invalid layer range"):
        Shard("m", start, end, n)


@pytest.mark.parametrize(
    ("n_layers", "n_stages", "sizes"),
    [(32, 4, [8, 8, 8, 8]), (22, 3, [8, 7, 7]), (4, 4, [1, 1, 1, 1]), (5, 1, [5])],
)
def test_even_split_covers_every_layer_once(n_layers: int, n_stages: int, sizes: list[int]) -> None:
    shards = even_split("m", n_layers, n_stages)
    assert [s.n_stage_layers for s in shards] == sizes
    assert shards[0].start_layer == 0 and shards[-1].end_layer == n_layers
    for a, b in itertools.pairwise(shards):
        assert a.end_layer == b.start_layer


def test_more_stages_than_layers_is_an_actionable_error() -> None:
    with pytest.raises(ValueError, match="use --stages 4 or fewer"):
        even_split("m", 4, 5)


def test_parse_layer_ranges() -> None:
    shards = parse_layer_ranges("m", 32, "0:10,10:22,22:32")
    assert [(s.start_layer, s.end_layer) for s in shards] == [(0, 10), (10, 22), (22, 32)]


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("0:10,8:32", "overlap"),
        ("0:10,12:32", "leave layers 10:12 unassigned"),
        ("0:10,10:33", "exceeds the model's 32 layers"),
        ("0:10,10:20", "add 20:32"),
        ("0-10,10:32", "write START:END"),
        ("0:a,10:32", "must be integers"),
        ("5:5,5:32", "END must exceed START"),
    ],
)
def test_bad_layer_ranges_name_the_problem(text: str, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        parse_layer_ranges("m", 32, text)
