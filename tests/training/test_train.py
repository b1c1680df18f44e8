"""Training a small model on this CPU (``fleetgui.training.train``): the learning rate's warm-up
and decay, Muon on the blocks' matrices and AdamW on the rest."""

from __future__ import annotations

import itertools

import pytest

from fleetgui.training.toy_pair.spec import TINY, ModelDims
from fleetgui.training.train import TrainSchedule, lr_at


def test_learning_rate_warms_up_then_decays_to_floor() -> None:
    sched = TrainSchedule(steps=100, batch_size=1, seq_len=8, lr=1.0, warmup_steps=10)
    rates = [lr_at(s, sched) for s in range(100)]
    assert rates[0] == pytest.approx(0.1)
    assert rates[9] == pytest.approx(1.0)
    assert all(a >= b for a, b in itertools.pairwise(rates[9:]))
    assert rates[-1] == pytest.approx(0.1, abs=0.01)


@pytest.mark.parametrize("muon_lr", [0.0, 0.05])
def test_muon_trains_the_blocks_matrices_and_adamw_the_rest(muon_lr: float) -> None:
    from fleetgui.training.toy_pair.pretrain import make_llama
    from fleetgui.training.train import make_optimizers, set_learning_rates

    dims = ModelDims(
        hidden_size=32, intermediate_size=64, num_layers=2, num_heads=2, num_kv_heads=1
    )
    model = make_llama(dims, vocab_size=64, max_positions=32, seed=0)
    schedule = TrainSchedule(
        steps=10, batch_size=1, seq_len=8, lr=1e-3, warmup_steps=2, muon_lr=muon_lr
    )
    optimizers = make_optimizers(model, schedule)
    owner = {
        id(p): type(opt).__name__
        for opt in optimizers
        for group in opt.param_groups
        for p in group["params"]
    }
    named = dict(model.named_parameters())
    assert len(owner) == len(named)  # every parameter trained, once
    for name, param in named.items():
        in_blocks = param.ndim == 2 and "embed_tokens" not in name and "lm_head" not in name
        expected = "Muon" if in_blocks and muon_lr else "AdamW"
        assert owner[id(param)] == expected, name
    set_learning_rates(optimizers, 0, schedule)  # the first warm-up step: half of each peak
    for optimizer in optimizers:
        for group in optimizer.param_groups:
            assert group["lr"] == pytest.approx(group["peak_lr"] / 2)
    peaks = {type(o).__name__: {g["peak_lr"] for g in o.param_groups} for o in optimizers}
    assert peaks == ({"AdamW": {1e-3}, "Muon": {muon_lr}} if muon_lr else {"AdamW": {1e-3}})
    assert TINY.target_train.muon_lr > 0  # the tests' builds take the Muon path too
