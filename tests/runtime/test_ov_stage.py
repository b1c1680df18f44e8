"""A stage compiled with only some of its outputs: the draft drops the top-1 head it never
reads, and computes the same logits."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest
from runtime_support import EXACT_STAGE, pipeline

from fleetgui.export.manifest import read_manifest
from fleetgui.runtime.ov_stage import LocalStage
from fleetgui.runtime.stage import ForwardRequest, LogitsHead, StageError

pytestmark = pytest.mark.slow


def stage(export_dir: Path, outputs: set[str] | None = None) -> LocalStage:
    manifest = read_manifest(export_dir)
    files = [export_dir / part for part in manifest.stages[0].model_files]
    return LocalStage(0, manifest.shard(0), files, EXACT_STAGE, outputs=outputs)


def logits_of(stage: LocalStage, ids: list[list[int]]) -> list[np.ndarray]:
    """The last position's logits after each chunk of ``ids``, fed in order to one stream."""
    out = []
    for chunk in ids:
        request = ForwardRequest(1, np.array([chunk], dtype=np.int64), head=LogitsHead())
        logits = stage.forward_blocking(request).logits
        assert logits is not None
        out.append(logits)
    return out


def test_a_stage_keeps_only_the_outputs_asked_for_and_computes_them_the_same(
    tiny_export: Callable[..., Path],
) -> None:
    whole = tiny_export(1)
    full, logits_only = stage(whole), stage(whole, {"logits"})
    assert {"logits", "top1_ids"} <= full.outputs
    assert logits_only.outputs == {"logits"}
    assert logits_only.is_last
    chunks = [[5, 9, 2, 7], [11], [3], [8, 1]]
    for a, b in zip(logits_of(full, chunks), logits_of(logits_only, chunks), strict=True):
        np.testing.assert_array_equal(a, b)


def test_asking_for_an_output_the_model_lacks_names_the_ones_it_has(
    tiny_export: Callable[..., Path],
) -> None:
    whole = tiny_export(1)
    with pytest.raises(ValueError, match=r"no output named \['hidden_out'\].*logits"):
        stage(whole, {"hidden_out"})


def test_the_draft_computes_logits_only(tiny_export: Callable[..., Path]) -> None:
    whole = tiny_export(1)
    pipe = pipeline(whole, draft=whole)
    assert pipe.draft is not None
    assert isinstance(pipe.draft.stage, LocalStage)
    assert pipe.draft.stage.outputs == {"logits"}


def test_a_request_outside_the_stages_contract_is_refused_and_changes_nothing(
    tiny_export: Callable[..., Path],
) -> None:
    """What a peer's FORWARD may carry that the stage cannot run (a batch of 2 broke the
    stream's state for every later request, then the worker process) is refused before
    anything changes; compacting a fresh stream is a no-op."""
    whole = tiny_export(1)
    s = stage(whole)
    prompt = np.array([[5, 6, 7]], dtype=np.int64)
    want = s.forward_blocking(ForwardRequest(1, prompt, head=LogitsHead())).logits
    bad = {
        "a batch of 2": ForwardRequest(2, np.repeat(prompt, 2, axis=0), head=LogitsHead()),
        "hidden states to the first stage": ForwardRequest(2, np.zeros((1, 3, 8), np.float32)),
        "no positions": ForwardRequest(2, np.zeros((1, 0), np.int64)),
        "rewinding more than it holds": ForwardRequest(2, prompt, rewind=4),
    }
    for why, request in bad.items():
        with pytest.raises(StageError, match="stage 0"):
            s.forward_blocking(request)
        assert s.mask_of(2).entries == 0, why
    for stream in (2, 3):  # the refused stream, and a fresh one asked to compact
        request = ForwardRequest(stream, prompt, compact=stream == 3, head=LogitsHead())
        got = s.forward_blocking(request).logits
        assert got is not None and want is not None
        np.testing.assert_allclose(got, want, rtol=0, atol=1e-6)
