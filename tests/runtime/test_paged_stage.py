"""A paged stage computes what the stateful stage computes, for one stream a pass or several
streams of different lengths in one pass, through rewinds and copied prefixes."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
from runtime_support import EXACT_STAGE

from fleetgui.export.manifest import read_manifest
from fleetgui.runtime.ov_stage import LocalStage
from fleetgui.runtime.paged_stage import PagedStage
from fleetgui.runtime.stage import (
    ForwardRequest,
    GreedyHead,
    LogitsHead,
    StageError,
    VerifyGreedyHead,
)
from fleetgui.runtime.stage_factory import WARM_UP_STREAM, compile_stage

pytestmark = pytest.mark.slow

ATOL = 1e-4  # f32 on both sides; attention kernels sum in other orders


def stages(export_dir: Path, index: int = 0) -> tuple[LocalStage, PagedStage]:
    manifest = read_manifest(export_dir)
    files = [export_dir / part for part in manifest.stages[index].model_files]
    shard = manifest.shard(index)
    return (
        LocalStage(index, shard, files, EXACT_STAGE),
        PagedStage(index, shard, files, EXACT_STAGE),
    )


def ids(*tokens: int) -> np.ndarray:
    return np.array([tokens], dtype=np.int64)


def prompt(seed: int, n: int) -> list[int]:
    return [int(t) for t in np.random.default_rng(seed).integers(3, 200, size=n)]


def test_one_stream_a_pass_matches_the_stateful_stage(tiny_export: Callable[..., Path]) -> None:
    stateful, paged = stages(tiny_export(1))
    steps = [prompt(0, 45), [7], [9, 4, 2], [5]]
    for chunk in steps:
        request = ForwardRequest(3, ids(*chunk), head=LogitsHead())
        want, got = stateful.forward_blocking(request), paged.forward_blocking(request)
        assert want.logits is not None and got.logits is not None
        np.testing.assert_allclose(got.logits, want.logits, atol=ATOL)
    assert paged.held(3) == sum(len(chunk) for chunk in steps)


def test_streams_of_different_lengths_share_one_pass(tiny_export: Callable[..., Path]) -> None:
    """A decode step, a verify window and a new prompt in one pass: each stream's tokens are
    those of its own passes on the stateful stage."""
    stateful, paged = stages(tiny_export(1))
    for stream, n in ((1, 70), (2, 33)):  # histories of their own (70 spans three blocks)
        request = ForwardRequest(stream, ids(*prompt(stream, n)))
        stateful.forward_blocking(request)
        paged.forward_blocking(request)
    batch = [
        ForwardRequest(1, ids(11), head=GreedyHead()),
        ForwardRequest(2, ids(4, 8, 15, 16), head=VerifyGreedyHead((8, 15, 16))),
        ForwardRequest(5, ids(*prompt(5, 40)), head=GreedyHead()),
    ]
    together = paged.forward_batch_blocking(batch)
    for request, result in zip(batch, together, strict=True):
        alone = stateful.forward_blocking(request)
        assert (result.stream_id, result.tokens, result.accepted) == (
            alone.stream_id,
            alone.tokens,
            alone.accepted,
        )
    assert [paged.held(s) for s in (1, 2, 5)] == [71, 37, 40]


def test_a_middle_stage_passes_hidden_states_per_stream(tiny_export: Callable[..., Path]) -> None:
    export = tiny_export(2)
    first_stateful, first_paged = stages(export, 0)
    stateful, paged = stages(export, 1)
    chunks = {1: prompt(1, 20), 2: prompt(2, 3)}
    hidden = {}
    for stream, chunk in chunks.items():
        request = ForwardRequest(stream, ids(*chunk))
        hidden[stream] = first_stateful.forward_blocking(request).payload
        paged_hidden = first_paged.forward_blocking(request).payload
        assert hidden[stream] is not None and paged_hidden is not None
        assert paged_hidden.shape == hidden[stream].shape == (1, len(chunk), 64)
        np.testing.assert_allclose(paged_hidden, hidden[stream], atol=ATOL)
    batch = [ForwardRequest(s, h, head=LogitsHead()) for s, h in hidden.items()]
    for request, result in zip(batch, paged.forward_batch_blocking(batch), strict=True):
        want = stateful.forward_blocking(request).logits
        assert want is not None and result.logits is not None
        np.testing.assert_allclose(result.logits, want, atol=ATOL)


def test_rewind_keep_and_copied_prefixes(tiny_export: Callable[..., Path]) -> None:
    """Rejected positions are overwritten after a rewind, ``keep`` drops what a run computed
    ahead, and a stream copied from another's prefix diverges without touching it."""
    stateful, paged = stages(tiny_export(1))
    history = prompt(7, 64)  # exactly two blocks: the copy shares both, then writes a third
    for stage in (stateful, paged):
        stage.forward_blocking(ForwardRequest(1, ids(*history)))
        stage.forward_blocking(ForwardRequest(1, ids(3, 4, 5)))
        stage.fork_blocking(1, 2, 60)
    assert paged.blocks_in_use == 3  # the copy shares the first two blocks
    steps = [
        ForwardRequest(1, ids(9), rewind=2, head=LogitsHead()),
        ForwardRequest(2, ids(6, 6), head=LogitsHead()),
        ForwardRequest(1, ids(8), keep=64, head=LogitsHead()),
        ForwardRequest(2, ids(1), rewind=1, compact=True, head=LogitsHead()),
    ]
    for request in steps:
        want = stateful.forward_blocking(request).logits
        got = paged.forward_blocking(request).logits
        assert want is not None and got is not None
        np.testing.assert_allclose(got, want, atol=ATOL)
    assert (paged.held(1), paged.held(2)) == (65, 62)


def test_a_bad_pass_changes_nothing(tiny_export: Callable[..., Path]) -> None:
    _, paged = stages(tiny_export(1))
    paged.forward_blocking(ForwardRequest(1, ids(1, 2, 3)))
    with pytest.raises(StageError, match="twice"):
        paged.forward_batch_blocking([ForwardRequest(1, ids(4)), ForwardRequest(1, ids(5))])
    with pytest.raises(StageError, match="cannot rewind 4 of stream 1's 3"):
        paged.forward_batch_blocking(
            [ForwardRequest(2, ids(4)), ForwardRequest(1, ids(5), rewind=4)]
        )
    with pytest.raises(StageError, match=r"takes token ids \[1, n\]"):
        paged.forward_blocking(ForwardRequest(1, np.zeros((2, 1), dtype=np.int64)))
    with pytest.raises(StageError, match="cannot start stream 3 from 9 tokens of stream 1"):
        paged.fork_blocking(1, 3, 9)
    assert (paged.held(1), paged.held(2)) == (3, 0)


def test_a_middle_stage_refuses_hidden_states_of_another_width(
    tiny_export: Callable[..., Path],
) -> None:
    """The paged graph keeps the stage's own hidden width, so a peer's payload of another width
    is refused before it reaches OpenVINO."""
    _, paged = stages(tiny_export(2), 1)
    assert paged.hidden_width == 64
    with pytest.raises(StageError, match=r"hidden states \[1, n, 64\]"):
        paged.forward_blocking(ForwardRequest(1, np.zeros((1, 2, 63), dtype=np.float32)))
    assert paged.held(1) == 0


@pytest.mark.parametrize("paged", [True, False])
def test_a_compiled_stage_is_warmed_up_and_holds_nothing(
    tiny_export: Callable[..., Path], paged: bool
) -> None:
    """compile_stage runs a throwaway prompt and steps on every stage and keeps none of it: a
    first request starts from an empty stage and computes what a fresh stage computes."""
    export = tiny_export(2)
    manifest = read_manifest(export)
    config = replace(EXACT_STAGE, paged=paged)
    warmed = [
        compile_stage(i, manifest.shard(i), [export / p for p in e.model_files], config)
        for i, e in enumerate(manifest.stages)
    ]
    assert [type(stage) for stage in warmed] == [PagedStage if paged else LocalStage] * 2
    assert all(stage.stream_ids() == [] for stage in warmed)
    fresh_first, _ = stages(export, 0)
    fresh_last, _ = stages(export, 1)
    request = ForwardRequest(WARM_UP_STREAM, ids(*prompt(3, 30)))
    hidden = warmed[0].forward_blocking(request).payload
    assert hidden is not None
    np.testing.assert_allclose(hidden, fresh_first.forward_blocking(request).payload, atol=ATOL)
    last = ForwardRequest(WARM_UP_STREAM, hidden, head=LogitsHead())
    got, want = warmed[1].forward_blocking(last).logits, fresh_last.forward_blocking(last).logits
    assert got is not None and want is not None
    np.testing.assert_allclose(got, want, atol=ATOL)
