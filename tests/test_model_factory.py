"""Tests for ``tests/model_factory.py``: tiny offline HF checkpoints and the shared tokenizer."""

from __future__ import annotations

import hashlib
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from fleetgui.torch_env import hide_torchvision

hide_torchvision()  # before transformers is imported (a broken torchvision is installed)

import model_factory as mf  # noqa: E402
import torch  # noqa: E402
from safetensors import safe_open  # noqa: E402
from transformers import (  # noqa: E402
    AutoConfig,
    AutoModelForCausalLM,
    AutoTokenizer,
    PreTrainedModel,
)

PROMPTS = ("The harbor town woke up slowly", "def fibonacci(n: int) -> list[int]:")
NEW_TOKENS = 16
SEQ_LEN = 48  # long enough for gemma2's (8) and mistral's (32) sliding windows to matter

_loaded: dict[tuple[str, str], tuple[Any, Any]] = {}


@pytest.fixture(autouse=True, scope="module")
def _one_torch_thread() -> Iterator[None]:
    """Tiny models gain nothing from intra-op threads, and on a busy 2-core machine the second
    thread makes ``generate`` 10-50x slower (spin-waiting); restore the setting afterwards."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


def _load(path: Path, attn: str = "sdpa", **kw: Any) -> PreTrainedModel:
    model = AutoModelForCausalLM.from_pretrained(path, attn_implementation=attn, **kw)
    return model.eval()


def _loaded_model(get: Callable[..., Path], family: str) -> tuple[Any, Any]:
    """(model, tokenizer) of ``family``, loaded once per session. gemma2 uses eager attention:
    SDPA silently ignores ``attn_logit_softcapping`` (see ``test_gemma2_softcap_needs_eager``)."""
    attn = "eager" if family == "gemma2" else "sdpa"
    key = (family, attn)
    if key not in _loaded:
        path = get(family)
        _loaded[key] = (_load(path, attn), AutoTokenizer.from_pretrained(path))
    return _loaded[key]


def _sequence(tokenizer: Any) -> torch.Tensor:
    """A fixed ``SEQ_LEN``-token input (starting with <|bos|>)."""
    text = mf.CORPUS_PATH.read_text(encoding="utf-8")[:1000]
    ids = tokenizer(text, return_tensors="pt").input_ids[:, :SEQ_LEN]
    assert ids.shape == (1, SEQ_LEN)
    return ids


@torch.no_grad()
def _logits(model: PreTrainedModel, ids: torch.Tensor) -> torch.Tensor:
    return model(ids).logits[0].float()


def _max_diff(a: torch.Tensor, b: torch.Tensor) -> float:
    return (a - b).abs().max().item()


# --------------------------------------------------------------------------------------------- #
# Every family: loads, generates, has the shared dimensions


@pytest.mark.parametrize("family", mf.FAMILIES)
def test_greedy_generation(tiny_models: Callable[..., Path], family: str) -> None:
    model, tok = _loaded_model(tiny_models, family)
    continuations = []
    for prompt in PROMPTS:
        enc = tok(prompt, return_tensors="pt")
        assert enc.input_ids[0, 0].item() == mf.BOS_ID
        with torch.no_grad():
            out = model.generate(**enc, max_new_tokens=NEW_TOKENS, do_sample=False)
        new = out[0, enc.input_ids.shape[1] :].tolist()
        assert len(new) == NEW_TOKENS
        assert mf.EOS_ID not in new and mf.PAD_ID not in new
        assert all(0 <= t < mf.VOCAB_SIZE for t in new)
        assert len(set(new)) >= 3, f"degenerate continuation {new}"
        text = tok.decode(new)
        assert isinstance(text, str) and text
        continuations.append(new)
    assert continuations[0] != continuations[1]


@pytest.mark.parametrize("family", mf.FAMILIES)
def test_dimensions_and_special_tokens(tiny_models: Callable[..., Path], family: str) -> None:
    path = tiny_models(family)
    cfg = AutoConfig.from_pretrained(path)
    tok = AutoTokenizer.from_pretrained(path)
    assert cfg.model_type == {"llama3": "llama", "gemma3": "gemma3_text"}.get(family, family)
    assert (cfg.hidden_size, cfg.num_hidden_layers) == (64, 4)
    assert (cfg.num_attention_heads, cfg.num_key_value_heads) == (4, 2)
    assert (cfg.intermediate_size, cfg.max_position_embeddings, cfg.vocab_size) == (128, 512, 512)
    assert cfg.tie_word_embeddings is (family in ("qwen2", "gemma2", "gemma3"))
    assert (
        (cfg.bos_token_id, cfg.eos_token_id, cfg.pad_token_id)
        == (tok.bos_token_id, tok.eos_token_id, tok.pad_token_id)
        == (mf.BOS_ID, mf.EOS_ID, mf.PAD_ID)
    )
    assert len(tok) == cfg.vocab_size

    with safe_open(str(path / "model.safetensors"), framework="pt") as f:
        names = set(f.keys())
        embed = f.get_tensor("model.embed_tokens.weight")
    assert embed.shape == (512, 64) and embed.dtype == torch.float32
    assert ("lm_head.weight" in names) is not cfg.tie_word_embeddings

    model, _ = _loaded_model(tiny_models, family)
    attn = model.model.layers[0].self_attn
    if family == "phi3":
        assert attn.qkv_proj.out_features == 64 + 2 * 32
    else:
        assert (attn.q_proj.out_features, attn.k_proj.out_features) == (64, 32)  # GQA, head_dim 16
    out_emb = model.get_output_embeddings().weight
    assert (out_emb.data_ptr() == model.get_input_embeddings().weight.data_ptr()) is (
        cfg.tie_word_embeddings
    )
    # eos/pad are never predicted (zero output rows); everything else is random
    assert not out_emb[mf.EOS_ID].any() and not out_emb[mf.PAD_ID].any()
    assert out_emb[mf.BOS_ID].any() and out_emb[mf.PAD_ID + 1 :].norm(dim=1).gt(0).all()


def test_n_layers(tiny_models: Callable[..., Path]) -> None:
    for family in ("llama", "gemma2"):
        cfg = AutoConfig.from_pretrained(tiny_models(family, n_layers=3))
        assert cfg.num_hidden_layers == 3
    assert cfg.layer_types == ["sliding_attention", "full_attention", "sliding_attention"]


# --------------------------------------------------------------------------------------------- #
# The feature that distinguishes each family is present and changes the numbers


def _check_llama(path: Path, model: PreTrainedModel, ids: torch.Tensor) -> None:
    assert model.config.rope_parameters["rope_type"] == "default"
    assert not model.config.tie_word_embeddings
    attn = model.model.layers[0].self_attn
    assert attn.q_proj.bias is None


def _check_llama3(path: Path, model: PreTrainedModel, ids: torch.Tensor) -> None:
    rope = model.config.rope_parameters
    assert rope == mf.LLAMA3_ROPE
    # The scaled frequencies fall in all three llama3 regimes: kept, interpolated, divided by 8.
    cfg = AutoConfig.from_pretrained(path)
    cfg.rope_parameters = {"rope_type": "default", "rope_theta": rope["rope_theta"]}
    plain = _load(path, config=cfg)
    ratio = plain.model.rotary_emb.inv_freq / model.model.rotary_emb.inv_freq
    assert ratio.shape == (8,)
    assert ratio[0].item() == pytest.approx(1.0)  # wavelength 6.3 < 64 / 4: kept
    assert 1.01 < ratio[1].item() < 7.99  # wavelength 32 in [16, 64]: interpolated
    assert torch.allclose(ratio[2:], torch.tensor(8.0))  # wavelength > 64: divided by factor
    assert _max_diff(_logits(model, ids), _logits(plain, ids)) > 0.1


def _check_qwen2(path: Path, model: PreTrainedModel, ids: torch.Tensor) -> None:
    assert model.config.tie_word_embeddings
    before = _logits(model, ids)
    state = {k: v.clone() for k, v in model.state_dict().items()}
    try:
        with torch.no_grad():
            for layer in model.model.layers:
                for proj in (
                    layer.self_attn.q_proj,
                    layer.self_attn.k_proj,
                    layer.self_attn.v_proj,
                ):
                    assert proj.bias is not None and proj.bias.abs().sum() > 0
                    proj.bias.zero_()
        assert _max_diff(before, _logits(model, ids)) > 0.1
    finally:
        model.load_state_dict(state)
    assert model.model.layers[0].self_attn.o_proj.bias is None


def _check_qwen3(path: Path, model: PreTrainedModel, ids: torch.Tensor) -> None:
    attn = model.model.layers[0].self_attn
    assert attn.q_norm.weight.shape == attn.k_norm.weight.shape == (16,)
    assert attn.q_proj.bias is None
    before = _logits(model, ids)
    state = {k: v.clone() for k, v in model.state_dict().items()}
    try:
        with torch.no_grad():
            for layer in model.model.layers:
                assert not torch.equal(layer.self_attn.q_norm.weight, torch.ones(16))
                layer.self_attn.q_norm.weight.fill_(1.0)
                layer.self_attn.k_norm.weight.fill_(1.0)
        assert _max_diff(before, _logits(model, ids)) > 0.1
    finally:
        model.load_state_dict(state)


def _check_mistral(path: Path, model: PreTrainedModel, ids: torch.Tensor) -> None:
    window = model.config.sliding_window
    assert window == mf.MISTRAL_SLIDING_WINDOW < SEQ_LEN
    cfg = AutoConfig.from_pretrained(path)
    cfg.sliding_window = None
    full = _logits(_load(path, config=cfg), ids)
    windowed = _logits(model, ids)
    assert _max_diff(windowed[:window], full[:window]) < 1e-4  # the window covers everything
    assert _max_diff(windowed[window:], full[window:]) > 0.1


def _check_phi3(path: Path, model: PreTrainedModel, ids: torch.Tensor) -> None:
    layer = model.model.layers[0]
    assert layer.self_attn.qkv_proj.weight.shape == (64 + 2 * 32, 64)
    assert layer.mlp.gate_up_proj.weight.shape == (2 * 128, 64)
    assert not hasattr(layer.self_attn, "q_proj")
    assert model.config.rope_parameters["partial_rotary_factor"] == mf.PHI3_PARTIAL_ROTARY_FACTOR
    assert model.model.rotary_emb.inv_freq.shape == (4,)  # 16 * 0.5 rotary dims / 2
    cfg = AutoConfig.from_pretrained(path)
    cfg.rope_parameters["partial_rotary_factor"] = 1.0
    assert _max_diff(_logits(model, ids), _logits(_load(path, config=cfg), ids)) > 0.1


def _check_gemma2(path: Path, model: PreTrainedModel, ids: torch.Tensor) -> None:
    cfg = model.config
    assert cfg.tie_word_embeddings
    assert cfg.layer_types == ["sliding_attention", "full_attention"] * 2
    assert cfg.sliding_window == mf.GEMMA2_SLIDING_WINDOW
    assert cfg.query_pre_attn_scalar == mf.GEMMA2_QUERY_PRE_ATTN_SCALAR != cfg.head_dim
    assert cfg.attn_logit_softcapping == mf.GEMMA2_ATTN_SOFTCAP
    assert cfg.final_logit_softcapping == mf.GEMMA2_FINAL_SOFTCAP
    assert float(model.model.embed_tokens.embed_scale) == pytest.approx(8.0)
    logits = _logits(model, ids)
    assert logits.abs().max() < mf.GEMMA2_FINAL_SOFTCAP
    # Each feature visibly changes the logits.
    variants = {
        "no sliding window": {"sliding_window": 4096},
        "no final softcap": {"final_logit_softcapping": None},
        "no attn softcap": {"attn_logit_softcapping": None},
        "head_dim scaling": {"query_pre_attn_scalar": cfg.head_dim},
    }
    for what, change in variants.items():
        other = AutoConfig.from_pretrained(path)
        for key, value in change.items():
            setattr(other, key, value)
        alt = _logits(_load(path, "eager", config=other), ids)
        assert _max_diff(logits, alt) > 0.1, what
        if what == "no sliding window":
            assert _max_diff(logits[: cfg.sliding_window], alt[: cfg.sliding_window]) < 1e-4


def _check_gemma3(path: Path, model: PreTrainedModel, ids: torch.Tensor) -> None:
    cfg = model.config
    assert cfg.model_type == "gemma3_text" and cfg.tie_word_embeddings
    assert cfg.layer_types == ["sliding_attention", "full_attention"] * 2
    assert cfg.sliding_window == mf.GEMMA3_SLIDING_WINDOW < SEQ_LEN
    assert cfg.query_pre_attn_scalar == mf.GEMMA3_QUERY_PRE_ATTN_SCALAR != cfg.head_dim
    assert cfg.attn_logit_softcapping is None and cfg.final_logit_softcapping is None
    assert cfg.rope_parameters == mf.GEMMA3_ROPE
    rotary = model.model.rotary_emb
    local, full = rotary.sliding_attention_inv_freq, rotary.full_attention_inv_freq
    assert local.shape == full.shape == (8,) and not torch.allclose(local, full)
    assert float(model.model.embed_tokens.embed_scale) == pytest.approx(8.0)
    attn = model.model.layers[0].self_attn
    assert attn.q_norm.weight.shape == attn.k_norm.weight.shape == (16,)
    logits = _logits(model, ids)
    # Each feature visibly changes the logits.
    rope = mf.GEMMA3_ROPE
    variants: dict[str, dict[str, Any]] = {
        "no sliding window": {"sliding_window": 4096},
        "head_dim scaling": {"query_pre_attn_scalar": cfg.head_dim},
        "global base everywhere": {
            "rope_parameters": {**rope, "sliding_attention": dict(rope["full_attention"])}
        },
        "local base everywhere": {
            "rope_parameters": {**rope, "full_attention": dict(rope["sliding_attention"])}
        },
    }
    for what, change in variants.items():
        other = AutoConfig.from_pretrained(path)
        for key, value in change.items():
            setattr(other, key, value)
        alt = _logits(_load(path, config=other), ids)
        assert _max_diff(logits, alt) > 0.1, what
        if what == "no sliding window":
            assert _max_diff(logits[: cfg.sliding_window], alt[: cfg.sliding_window]) < 1e-4
    state = {k: v.clone() for k, v in model.state_dict().items()}
    try:
        with torch.no_grad():
            for layer in model.model.layers:
                layer.self_attn.q_norm.weight.zero_()  # Gemma norms scale by (1 + w)
                layer.self_attn.k_norm.weight.zero_()
        assert _max_diff(logits, _logits(model, ids)) > 0.1
    finally:
        model.load_state_dict(state)


_FEATURE_CHECKS: dict[str, Callable[[Path, PreTrainedModel, torch.Tensor], None]] = {
    "llama": _check_llama,
    "llama3": _check_llama3,
    "qwen2": _check_qwen2,
    "qwen3": _check_qwen3,
    "mistral": _check_mistral,
    "phi3": _check_phi3,
    "gemma2": _check_gemma2,
    "gemma3": _check_gemma3,
}


def test_feature_checks_cover_families() -> None:
    assert set(_FEATURE_CHECKS) == set(mf.FAMILIES)


@pytest.mark.parametrize("family", mf.FAMILIES)
def test_family_feature(tiny_models: Callable[..., Path], family: str) -> None:
    model, tok = _loaded_model(tiny_models, family)
    _FEATURE_CHECKS[family](tiny_models(family), model, _sequence(tok))


def test_gemma2_softcap_needs_eager(tiny_models: Callable[..., Path]) -> None:
    """Documents a transformers behaviour: SDPA drops ``attn_logit_softcapping`` silently, so a
    gemma2 reference must be loaded with ``attn_implementation="eager"``."""
    path = tiny_models("gemma2")
    eager, tok = _loaded_model(tiny_models, "gemma2")
    ids = _sequence(tok)
    cfg = AutoConfig.from_pretrained(path)
    cfg.attn_logit_softcapping = None
    no_cap = _logits(_load(path, "eager", config=cfg), ids)
    sdpa = _logits(_load(path, "sdpa"), ids)
    assert _max_diff(sdpa, no_cap) < 1e-4
    assert _max_diff(sdpa, _logits(eager, ids)) > 0.1


# --------------------------------------------------------------------------------------------- #
# Determinism, errors, cache


def _sha(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def test_build_is_deterministic(tmp_path: Path) -> None:
    a = mf.build_tiny_model("llama", tmp_path / "a")
    b = mf.build_tiny_model("llama", tmp_path / "b")
    for name in ("model.safetensors", "config.json", "tokenizer.json", "tokenizer_config.json"):
        assert (a / name).read_bytes() == (b / name).read_bytes(), name
    other_seed = mf.build_tiny_model("llama", tmp_path / "c", seed=1)
    mistral = mf.build_tiny_model("mistral", tmp_path / "d")  # same tensor names and shapes
    assert len({_sha(d / "model.safetensors") for d in (a, other_seed, mistral)}) == 3


def test_tokenizer_round_trip(tmp_path: Path) -> None:
    tok = AutoTokenizer.from_pretrained(mf.build_tokenizer(tmp_path))
    assert len(tok) == mf.VOCAB_SIZE
    assert [tok.convert_tokens_to_ids(t) for t in mf.SPECIAL_TOKENS] == [0, 1, 2]
    texts = [
        "The harbor town woke up slowly on most mornings.",
        'def greet(name: str) -> str:\n    return f"Hello, {name}!"\n',
        "  leading and trailing spaces  \n\n\ttabs",
        "Unicode: café, naïve, 日本語, emoji 🚀, math ∑ x²",
        "",
    ]
    for text in texts:
        ids = tok.encode(text, add_special_tokens=False)
        assert tok.decode(ids) == text
        with_bos = tok(text).input_ids
        assert with_bos == [mf.BOS_ID, *ids]
        assert tok.decode(with_bos, skip_special_tokens=True) == text
    # BPE merges learned from the corpus: common English words are single tokens.
    assert len(tok.encode(" the", add_special_tokens=False)) == 1
    assert len(tok.encode(texts[0], add_special_tokens=False)) < 0.6 * len(texts[0])
    batch = tok(["a", "longer text here"], padding=True, return_tensors="pt")
    assert batch.input_ids[0, -1].item() == mf.PAD_ID


_TRAIN_SNIPPET = (
    "import hashlib, sys; sys.path.insert(0, sys.argv[1]); import model_factory as mf; "
    "print(hashlib.sha256(mf._train_backend_tokenizer().to_str().encode()).hexdigest())"
)


def test_tokenizer_training_is_deterministic() -> None:
    here = hashlib.sha256(mf._train_backend_tokenizer().to_str().encode()).hexdigest()
    assert hashlib.sha256(mf._train_backend_tokenizer().to_str().encode()).hexdigest() == here
    # A fresh process (Rust hash maps are seeded per process) trains the same tokenizer.
    out = subprocess.run(
        [sys.executable, "-c", _TRAIN_SNIPPET, str(Path(mf.__file__).parent)],
        capture_output=True,
        text=True,
        check=True,
        timeout=60,
    )
    assert out.stdout.strip() == here


def test_unknown_family(tmp_path: Path) -> None:
    for call in (
        lambda: mf.build_tiny_model("gpt2", tmp_path / "x"),
        lambda: mf.cached_model("gpt2", tmp_path / "cache"),
    ):
        with pytest.raises(ValueError, match="gpt2") as info:
            call()
        assert all(family in str(info.value) for family in mf.FAMILIES)
    assert not (tmp_path / "x").exists() and not (tmp_path / "cache").exists()


def test_cached_model(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    first = mf.cached_model("qwen3", tmp_path, n_layers=3)
    assert first.parent == tmp_path and first.name.startswith("qwen3-")
    assert AutoConfig.from_pretrained(first).num_hidden_layers == 3

    def fail(*args: object, **kwargs: object) -> Path:
        raise RuntimeError("interrupted")

    monkeypatch.setattr(mf, "build_tiny_model", fail)
    assert mf.cached_model("qwen3", tmp_path, n_layers=3) == first  # cached: no rebuild
    with pytest.raises(RuntimeError, match="interrupted"):
        mf.cached_model("qwen3", tmp_path, n_layers=4)
    assert [p.name for p in tmp_path.iterdir()] == [first.name]  # no partial or temp dir left
    assert mf.cache_key("qwen3", n_layers=3) != mf.cache_key("qwen3", n_layers=3, seed=1)
    assert mf.cache_key("qwen3") == mf.cache_key("qwen3", n_layers=4, seed=0)  # defaults applied
    with pytest.raises(TypeError):
        mf.cached_model("qwen3", tmp_path, layers=3)


@pytest.mark.slow
def test_bench_llama_size() -> None:
    cfg = mf.make_bench_config()
    with torch.device("meta"):
        model = AutoModelForCausalLM.from_config(cfg)
    n_params = sum(p.numel() for p in model.parameters())
    assert 150e6 <= n_params <= 300e6
    assert not cfg.tie_word_embeddings and cfg.vocab_size == 32000
    assert model.lm_head.weight is not model.model.embed_tokens.weight
