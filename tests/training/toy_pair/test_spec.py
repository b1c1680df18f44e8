"""The toy pair's sizes (``fleetgui.training.toy_pair.spec``): each builds models of its stated
scale, the draft cheap beside the target."""

from __future__ import annotations

import pytest

from fleetgui.training.toy_pair.pretrain import make_llama
from fleetgui.training.toy_pair.spec import SIZES, get_spec
from fleetgui.training.train import count_parameters

#: Parameter counts (millions) each size's models must fall in: the targets "tens of millions"
#: (the medium one larger), the drafts "a few million"; tiny is for tests.
PARAMETER_RANGES = {
    "small": ((10, 30), (1, 5)),
    "medium": ((30, 100), (1, 10)),
    "tiny": ((0.1, 1), (0.01, 0.5)),
}


@pytest.mark.parametrize("size", SIZES)
def test_each_size_builds_models_of_its_stated_scale(size: str) -> None:
    spec = get_spec(size)
    (target_lo, target_hi), (draft_lo, draft_hi) = PARAMETER_RANGES[size]
    counts = {}
    for role, dims in (("target", spec.target), ("draft", spec.draft)):
        assert dims.hidden_size % dims.num_heads == 0 and dims.num_heads % dims.num_kv_heads == 0
        model = make_llama(dims, spec.vocab_size, spec.max_positions, spec.seed)
        counts[role] = count_parameters(model) / 1e6
    assert target_lo <= counts["target"] <= target_hi, counts
    assert draft_lo <= counts["draft"] <= draft_hi, counts
    assert counts["draft"] < counts["target"] / 3  # cheap enough to propose K tokens
