"""How the demo build judges its target's code, and how it trains the target (fast unit tests)."""

from __future__ import annotations

import pytest

from fleetgui.demo.python_quality import block_prompts, distinct_ngram_share, valid_python_prefix
from fleetgui.demo.spec import TINY, ModelDims, TrainSchedule


@pytest.mark.parametrize(
    ("text", "valid"),
    [
        ("def f(x):\n    if x:\n", True),  # an open block: more input needed, not an error
        ("def f(x):\n    return (None, 1, 1,\n", True),  # an open bracket, likewise
        ("class A:\n    def f(self):\n        self.a = 0\n        self.a = 0\n", True),
        ("def f(x):\n    return x\n    retur", True),  # the unfinished last line is cut
        ("def f(x):\n    return (None, 1))\n", False),  # an unmatched bracket
        ("def f(x):\n    if not isinstance(not in str):\n", False),
        ("def f():\n    import _from distutils\n", False),
        ("def f(:\n", False),
    ],
)
def test_valid_python_prefix_accepts_unfinished_code_but_not_errors(text: str, valid: bool) -> None:
    assert valid_python_prefix(text) is valid


def test_distinct_ngram_share_sees_a_loop() -> None:
    assert distinct_ngram_share(list(range(20))) == 1.0
    assert distinct_ngram_share([1, 2, 3]) == 1.0  # too short to repeat a 4-gram
    loop = [5, 6] * 20
    assert distinct_ngram_share(loop) == pytest.approx(2 / 37)
    half = list(range(20)) + [7] * 20
    assert 0.5 < distinct_ngram_share(half) < 0.6


def test_block_prompts_start_at_top_level_definitions_evenly_spread() -> None:
    files = [
        "import os\n\ndef a(x):\n    return x\n\nclass B:\n    x = 1\n    y = 2\n",
        "def c():\n    pass\n\n    def nested():\n        pass\n",
        "x = 1\n",
    ]
    every = block_prompts(files, 10, lines=2)
    assert every == ["def a(x):\n    return x\n", "class B:\n    x = 1\n", "def c():\n    pass\n"]
    assert block_prompts(files, 2, lines=2) == [every[0], every[1]]
    assert block_prompts(files, 10, lines=4) == [
        "def a(x):\n    return x\n\nclass B:\n",
        "class B:\n    x = 1\n    y = 2\n\n",
        "def c():\n    pass\n\n    def nested():\n",
    ]


@pytest.mark.parametrize("muon_lr", [0.0, 0.05])
def test_muon_trains_the_blocks_matrices_and_adamw_the_rest(muon_lr: float) -> None:
    from fleetgui.demo.train import make_llama, make_optimizers, set_learning_rates

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
