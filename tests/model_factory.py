"""Tiny, deterministic HuggingFace causal-LM checkpoints for tests and benchmarks.

Everything here is built offline from code and a small text corpus shipped in the repository
(``tests/data/corpus.txt``); nothing is downloaded from a model hub.

* :func:`build_tokenizer` trains a byte-level BPE tokenizer (vocabulary :data:`VOCAB_SIZE`, special
  tokens ``<|bos|>``/``<|eos|>``/``<|pad|>`` with ids 0/1/2) and saves it with ``save_pretrained``.
* :func:`build_tiny_model` writes a randomly initialised model of one of :data:`FAMILIES` (hidden
  size 64, 4 heads with 2 KV heads, head_dim 16) plus the tokenizer, loadable with
  ``AutoModelForCausalLM.from_pretrained(dir)`` / ``AutoTokenizer.from_pretrained(dir)``.
* :func:`build_bench_llama` writes a ~245M parameter random Llama (float16 safetensors) for
  benchmarks.
* :func:`cached_model` builds either into a content-addressed cache directory, atomically.

Weights are initialised by this module (not by transformers' ``_init_weights``) from a
``torch.Generator`` seeded with ``seed``, so a build is byte-for-byte reproducible. Linear weights
have std ``INIT_GAIN / sqrt(fan_in)`` so that attention is far from uniform (positions, RoPE
variants and sliding windows visibly change the outputs); norm weights and biases get random
perturbations so that code ignoring them (e.g. a dropped qkv bias or q_norm weight) produces
different numbers. The lm_head rows of ``<|eos|>`` and ``<|pad|>`` are zero, so greedy decoding
never emits them and continuations always have the requested length.

torch and transformers are imported lazily, so importing this module (e.g. from ``conftest.py``)
stays cheap and works where they are not installed.
"""

from __future__ import annotations

import copy
import functools
import hashlib
import inspect
import json
import logging
import math
import os
import shutil
import tempfile
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from transformers import PretrainedConfig, PreTrainedModel, PreTrainedTokenizerFast

log = logging.getLogger(__name__)

#: Bump whenever a change here alters what gets written, to invalidate :func:`cached_model` dirs.
FACTORY_VERSION = 1

#: Model families :func:`build_tiny_model` knows.
FAMILIES: tuple[str, ...] = (
    "llama",
    "llama3",
    "qwen2",
    "qwen3",
    "mistral",
    "phi3",
    "gemma2",
    "gemma3",
)

#: Extra key accepted by :func:`cached_model` for :func:`build_bench_llama`.
BENCH_FAMILY = "llama-bench"

CORPUS_PATH = Path(__file__).resolve().parent / "data" / "corpus.txt"

VOCAB_SIZE = 512
BOS_TOKEN, EOS_TOKEN, PAD_TOKEN = "<|bos|>", "<|eos|>", "<|pad|>"
SPECIAL_TOKENS: tuple[str, ...] = (BOS_TOKEN, EOS_TOKEN, PAD_TOKEN)
BOS_ID, EOS_ID, PAD_ID = 0, 1, 2  # BpeTrainer assigns special tokens the first ids, in order

# Tiny model dimensions (shared by every family).
HIDDEN_SIZE = 64
INTERMEDIATE_SIZE = 128
NUM_HEADS = 4
NUM_KV_HEADS = 2
HEAD_DIM = 16
MAX_POSITIONS = 512

#: Linear weights and embeddings get std ``INIT_GAIN / sqrt(fan_in)`` (fan_in = hidden size for
#: embeddings, which double as the lm_head when tied): attention logits of order 1-10, final logits
#: with std ~1.5.
INIT_GAIN = 1.5
#: Gemma 2 and 3 multiply embeddings by sqrt(hidden) and tie them to the lm_head, so a token's own
#: embedding dominates its logits and a random model just repeats the last token. A smaller
#: embedding std (gain 0.4 instead of 1.5) makes the sublayer outputs dominate instead. Gemma 3
#: (no final soft-cap here) needs a smaller one still: at 0.4 its greedy continuations repeat one
#: token.
GEMMA2_EMBED_GAIN = 0.4
GEMMA3_EMBED_GAIN = 0.2
EMBED_GAINS: dict[str, float] = {"gemma2": GEMMA2_EMBED_GAIN, "gemma3": GEMMA3_EMBED_GAIN}
#: Std of the random perturbation added to norm weights and used for biases.
NORM_NOISE_STD = 0.1
BIAS_STD = 0.1

#: Llama 3.x style RoPE scaling. ``original_max_position_embeddings`` is tiny so that, with head_dim
#: 16 and theta 5e5, the 8 frequencies fall in all three llama3 regimes: 1 kept (wavelength < 16),
#: 1 smoothly interpolated (16..64) and 6 divided by ``factor`` (> 64).
LLAMA3_ROPE: dict[str, Any] = {
    "rope_type": "llama3",
    "rope_theta": 500000.0,
    "factor": 8.0,
    "low_freq_factor": 1.0,
    "high_freq_factor": 4.0,
    "original_max_position_embeddings": 64,
}
MISTRAL_SLIDING_WINDOW = 32
PHI3_PARTIAL_ROTARY_FACTOR = 0.5
GEMMA2_SLIDING_WINDOW = 8
GEMMA2_QUERY_PRE_ATTN_SCALAR = 32  # != head_dim (16), so using head_dim**-0.5 instead is visible
GEMMA2_ATTN_SOFTCAP = 4.0  # small enough to bite: attention logits here reach ~5
GEMMA2_FINAL_SOFTCAP = 2.0  # small enough to bite: final logits here reach ~1.5-2
#: Gemma 3 (text): sliding and full layers rotate with different bases (local 1e4, global 1e6),
#: and the full layers' RoPE is linearly scaled as in Gemma 3 4B and larger. No soft-capping.
GEMMA3_SLIDING_WINDOW = 8
GEMMA3_QUERY_PRE_ATTN_SCALAR = 32  # != head_dim (16), so using head_dim**-0.5 instead is visible
GEMMA3_ROPE: dict[str, dict[str, Any]] = {
    "sliding_attention": {"rope_type": "default", "rope_theta": 10000.0},
    "full_attention": {"rope_type": "linear", "rope_theta": 1000000.0, "factor": 8.0},
}

#: Benchmark Llama (~245M parameters).
BENCH_DIMS: dict[str, int] = {
    "vocab_size": 32000,
    "hidden_size": 1024,
    "intermediate_size": 2816,
    "num_hidden_layers": 16,
    "num_attention_heads": 16,
    "num_key_value_heads": 4,
    "head_dim": 64,
    "max_position_embeddings": 4096,
}
# A ~1.0B-parameter Llama: only for the export memory benchmark (peak RSS vs model size).
BILLION_DIMS: dict[str, int] = {
    **BENCH_DIMS,
    "hidden_size": 2048,
    "intermediate_size": 5632,
    "num_hidden_layers": 20,
    "num_attention_heads": 32,
    "num_key_value_heads": 8,
}
BENCH_INIT_GAIN = 1.0

_MANIFEST = "fleetgui_factory.json"


# --------------------------------------------------------------------------------------------- #
# Tokenizer


def _train_backend_tokenizer(corpus_path: Path = CORPUS_PATH) -> Any:
    """Train the byte-level BPE ``tokenizers.Tokenizer`` on the local corpus (deterministic)."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers

    text = corpus_path.read_text(encoding="utf-8")
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=VOCAB_SIZE,
        min_frequency=2,
        special_tokens=list(SPECIAL_TOKENS),
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator([text], trainer=trainer)
    ids = [tok.token_to_id(t) for t in SPECIAL_TOKENS]
    if ids != [BOS_ID, EOS_ID, PAD_ID] or tok.get_vocab_size() != VOCAB_SIZE:
        raise RuntimeError(
            f"unexpected tokenizer layout: special ids {ids}, vocab {tok.get_vocab_size()}"
        )
    # Llama-style: prepend <|bos|> when add_special_tokens=True (the HF default).
    tok.post_processor = processors.TemplateProcessing(
        single=f"{BOS_TOKEN} $A",
        pair=f"{BOS_TOKEN} $A {BOS_TOKEN} $B",
        special_tokens=[(BOS_TOKEN, BOS_ID)],
    )
    return tok


@functools.lru_cache(maxsize=1)
def _tokenizer_json() -> str:
    """The trained tokenizer serialised to JSON, trained once per process."""
    return str(_train_backend_tokenizer().to_str())


def make_tokenizer() -> PreTrainedTokenizerFast:
    """Train the shared tokenizer and wrap it in a ``PreTrainedTokenizerFast`` (nothing written)."""
    from fleetgui.torch_env import hide_torchvision

    hide_torchvision()
    from tokenizers import Tokenizer
    from transformers import PreTrainedTokenizerFast

    return PreTrainedTokenizerFast(
        tokenizer_object=Tokenizer.from_str(_tokenizer_json()),
        bos_token=BOS_TOKEN,
        eos_token=EOS_TOKEN,
        pad_token=PAD_TOKEN,
        model_max_length=MAX_POSITIONS,
        clean_up_tokenization_spaces=False,
    )


def build_tokenizer(out_dir: Path) -> Path:
    """Train the shared byte-level BPE tokenizer and ``save_pretrained`` it into ``out_dir``.

    Returns ``out_dir``. The result is identical on every call (training is deterministic).
    """
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    make_tokenizer().save_pretrained(str(out_dir))
    return out_dir


# --------------------------------------------------------------------------------------------- #
# Configs


def _common_kwargs(n_layers: int) -> dict[str, Any]:
    return {
        "vocab_size": VOCAB_SIZE,
        "hidden_size": HIDDEN_SIZE,
        "intermediate_size": INTERMEDIATE_SIZE,
        "num_hidden_layers": n_layers,
        "num_attention_heads": NUM_HEADS,
        "num_key_value_heads": NUM_KV_HEADS,
        "max_position_embeddings": MAX_POSITIONS,
        "rms_norm_eps": 1e-6,
        "bos_token_id": BOS_ID,
        "eos_token_id": EOS_ID,
        "pad_token_id": PAD_ID,
        "tie_word_embeddings": False,
        "initializer_range": 0.02,  # unused: this module initialises the weights itself
    }


def _family_spec(family: str, n_layers: int) -> tuple[str, dict[str, Any]]:
    """(transformers config class name, keyword overrides of :func:`_common_kwargs`)."""
    rope = {"rope_type": "default", "rope_theta": 10000.0}
    qwen_rope = {"rope_type": "default", "rope_theta": 1000000.0}
    specs: dict[str, tuple[str, dict[str, Any]]] = {
        "llama": ("LlamaConfig", {"head_dim": HEAD_DIM, "rope_parameters": rope}),
        "llama3": ("LlamaConfig", {"head_dim": HEAD_DIM, "rope_parameters": dict(LLAMA3_ROPE)}),
        # q/k/v biases are unconditional in Qwen2Attention; head_dim is derived (64 / 4)
        "qwen2": (
            "Qwen2Config",
            {
                "tie_word_embeddings": True,
                "rope_parameters": qwen_rope,
                "use_sliding_window": False,
                "max_window_layers": n_layers,
            },
        ),
        # per-head RMSNorm on q and k (q_norm / k_norm)
        "qwen3": (
            "Qwen3Config",
            {
                "head_dim": HEAD_DIM,
                "rope_parameters": qwen_rope,
                "attention_bias": False,
                "use_sliding_window": False,
                "max_window_layers": n_layers,
            },
        ),
        "mistral": (
            "MistralConfig",
            {
                "head_dim": HEAD_DIM,
                "rope_parameters": rope,
                "sliding_window": MISTRAL_SLIDING_WINDOW,
            },
        ),
        # fused qkv_proj / gate_up_proj; head_dim derived (64 / 4). In transformers 5 the partial
        # rotary factor lives in rope_parameters (Phi3Config has no top-level field for it).
        "phi3": (
            "Phi3Config",
            {
                "rope_parameters": {**rope, "partial_rotary_factor": PHI3_PARTIAL_ROTARY_FACTOR},
                "original_max_position_embeddings": MAX_POSITIONS,
                "sliding_window": None,
            },
        ),
        "gemma2": (
            "Gemma2Config",
            {
                "tie_word_embeddings": True,
                "head_dim": HEAD_DIM,
                "hidden_activation": "gelu_pytorch_tanh",
                "rope_parameters": rope,
                "query_pre_attn_scalar": GEMMA2_QUERY_PRE_ATTN_SCALAR,
                "sliding_window": GEMMA2_SLIDING_WINDOW,
                "layer_types": [
                    "sliding_attention" if i % 2 == 0 else "full_attention" for i in range(n_layers)
                ],
                "attn_logit_softcapping": GEMMA2_ATTN_SOFTCAP,
                "final_logit_softcapping": GEMMA2_FINAL_SOFTCAP,
            },
        ),
        # model_type gemma3_text: q_norm/k_norm, a rotary table per layer type, no soft-capping
        "gemma3": (
            "Gemma3TextConfig",
            {
                "tie_word_embeddings": True,
                "head_dim": HEAD_DIM,
                "hidden_activation": "gelu_pytorch_tanh",
                "rope_parameters": GEMMA3_ROPE,
                "query_pre_attn_scalar": GEMMA3_QUERY_PRE_ATTN_SCALAR,
                "sliding_window": GEMMA3_SLIDING_WINDOW,
                "layer_types": [
                    "sliding_attention" if i % 2 == 0 else "full_attention" for i in range(n_layers)
                ],
                "attn_logit_softcapping": None,
                "final_logit_softcapping": None,
            },
        ),
    }
    cls_name, overrides = specs[family]
    return cls_name, copy.deepcopy(overrides)


def make_config(family: str, *, n_layers: int = 4) -> PretrainedConfig:
    """Return the transformers config of a tiny model of ``family`` (see :data:`FAMILIES`)."""
    if family not in FAMILIES:
        raise ValueError(f"unknown model family {family!r}; known families: {', '.join(FAMILIES)}")
    if n_layers < 1:
        raise ValueError(f"n_layers must be >= 1, got {n_layers}")
    from fleetgui.torch_env import hide_torchvision

    hide_torchvision()
    import transformers

    cls_name, overrides = _family_spec(family, n_layers)
    return getattr(transformers, cls_name)(**{**_common_kwargs(n_layers), **overrides})


# --------------------------------------------------------------------------------------------- #
# Weights


def _family_seed(family: str, seed: int) -> int:
    """Seed of the weight generator: families differ even where their parameters coincide."""
    return int.from_bytes(hashlib.sha256(f"{family}:{seed}".encode()).digest()[:8], "little")


def _randomize_weights(
    model: PreTrainedModel,
    seed: int,
    *,
    gain: float,
    embed_gain: float | None = None,
    never_predict: tuple[int, ...] = (),
) -> None:
    """Overwrite every parameter from a generator seeded with ``seed``, independent of transformers.

    Norm weights keep transformers' centre (1 for most families, 0 for Gemma's ``1 + w`` norms)
    plus Gaussian noise of std :data:`NORM_NOISE_STD`; biases are Gaussian with std
    :data:`BIAS_STD`; embeddings have std ``embed_gain / sqrt(hidden)`` (``embed_gain`` defaults to
    ``gain``) and other matrices ``gain / sqrt(in_features)``. The output-embedding rows of
    ``never_predict`` are zeroed: their logit is exactly 0, while the largest of the other ~500
    random logits is always positive, so greedy decoding never emits them (e.g. ``<|eos|>``, which
    would end a continuation early).
    """
    import torch

    generator = torch.Generator().manual_seed(seed)
    hidden = model.config.hidden_size
    embed_gain = gain if embed_gain is None else embed_gain
    with torch.no_grad():
        for name, param in sorted(model.named_parameters(), key=lambda kv: kv[0]):
            noise = torch.randn(param.shape, generator=generator, dtype=torch.float32)
            owner = name.rsplit(".", 2)[-2] if "." in name else ""
            if "norm" in owner.lower() and name.endswith(".weight"):
                param.add_(noise.mul_(NORM_NOISE_STD).to(param.dtype))
            elif name.endswith(".bias"):
                param.copy_(noise.mul_(BIAS_STD))
            elif "embed_tokens" in name:
                param.copy_(noise.mul_(embed_gain / math.sqrt(hidden)))
            elif param.dim() == 2:
                param.copy_(noise.mul_(gain / math.sqrt(param.shape[1])))
            else:
                raise RuntimeError(f"don't know how to initialise parameter {name} {param.shape}")
        out_emb = model.get_output_embeddings().weight
        for token_id in never_predict:
            out_emb[token_id].zero_()


def _build_model(config: PretrainedConfig, seed: int) -> PreTrainedModel:
    """Construct the model without transformers' weight init; :func:`_randomize_weights` then
    overwrites every parameter (norm weights keep their constructor value, 1 or 0, as centre)."""
    import torch
    from transformers import AutoModelForCausalLM
    from transformers.initialization import no_init_weights

    torch.manual_seed(seed)  # nothing should draw from it; belt and braces
    with no_init_weights():
        model = AutoModelForCausalLM.from_config(config, dtype=torch.float32)
    model.tie_weights()  # skipped along with init_weights
    if config.tie_word_embeddings and (
        model.get_output_embeddings().weight is not model.get_input_embeddings().weight
    ):
        raise RuntimeError(f"{type(model).__name__}: lm_head is not tied to the embeddings")
    model.eval()
    return model


def _write_manifest(out_dir: Path, info: dict[str, Any]) -> None:
    (out_dir / _MANIFEST).write_text(
        json.dumps(info, indent=2, sort_keys=True) + "\n", encoding="utf-8"
    )


def _versions() -> dict[str, str]:
    import tokenizers
    import torch
    import transformers

    return {
        "torch": torch.__version__,
        "transformers": transformers.__version__,
        "tokenizers": tokenizers.__version__,
    }


def build_tiny_model(family: str, out_dir: Path, *, n_layers: int = 4, seed: int = 0) -> Path:
    """Write a tiny random ``family`` model (config, safetensors, tokenizer) into ``out_dir``.

    Raises ``ValueError`` for an unknown family (the message lists :data:`FAMILIES`). Returns
    ``out_dir``. The same arguments always produce byte-identical ``model.safetensors``.
    """
    config = make_config(family, n_layers=n_layers)  # validates family before touching the disk
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    model = _build_model(config, seed)
    _randomize_weights(
        model,
        _family_seed(family, seed),
        gain=INIT_GAIN,
        embed_gain=EMBED_GAINS.get(family),
        never_predict=(EOS_ID, PAD_ID),
    )
    model.save_pretrained(str(out_dir))
    build_tokenizer(out_dir)
    _write_manifest(
        out_dir,
        {
            "family": family,
            "n_layers": n_layers,
            "seed": seed,
            "factory_version": FACTORY_VERSION,
            **_versions(),
        },
    )
    log.info("built tiny %s model (%d layers, seed %d) in %s", family, n_layers, seed, out_dir)
    return out_dir


def make_bench_config(
    *, dtype: str = "float16", dims: dict[str, int] | None = None
) -> PretrainedConfig:
    """Config of the ~245M parameter benchmark Llama (untied lm_head, vocab 32000)."""
    from fleetgui.torch_env import hide_torchvision

    hide_torchvision()
    from transformers import LlamaConfig

    return LlamaConfig(
        **(dims or BENCH_DIMS),
        rms_norm_eps=1e-5,
        rope_parameters={"rope_type": "default", "rope_theta": 10000.0},
        bos_token_id=BOS_ID,
        eos_token_id=EOS_ID,
        pad_token_id=PAD_ID,
        tie_word_embeddings=False,
        dtype=dtype,
    )


def build_bench_llama(out_dir: Path, *, seed: int = 0, dims: dict[str, int] | None = None) -> Path:
    """Write the ~245M parameter random benchmark Llama (float16 safetensors) into ``out_dir``.

    The config's ``vocab_size`` is 32000 while the shared tokenizer has :data:`VOCAB_SIZE` tokens.
    The ``lm_head`` rows of ids the tokenizer does not have are zero, so greedy decoding only emits
    decodable ids while the lm_head matmul keeps its full 32000-wide cost. Returns ``out_dir``.
    """
    import torch

    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    config = make_bench_config(dtype="float16", dims=dims)
    model = _build_model(config, seed)
    _randomize_weights(
        model,
        _family_seed(BENCH_FAMILY, seed),
        gain=BENCH_INIT_GAIN,
        never_predict=(EOS_ID, PAD_ID),
    )
    with torch.no_grad():
        model.lm_head.weight[VOCAB_SIZE:].zero_()
    model = model.to(torch.float16)
    n_params = sum(p.numel() for p in model.parameters())
    model.save_pretrained(str(out_dir))
    build_tokenizer(out_dir)
    _write_manifest(
        out_dir,
        {
            "family": BENCH_FAMILY,
            "seed": seed,
            "n_params": n_params,
            "factory_version": FACTORY_VERSION,
            **_versions(),
        },
    )
    log.info("built bench llama (%.1fM params, seed %d) in %s", n_params / 1e6, seed, out_dir)
    return out_dir


# --------------------------------------------------------------------------------------------- #
# Cache

_TINY_SIGNATURE = inspect.signature(build_tiny_model)
_BENCH_SIGNATURE = inspect.signature(build_bench_llama)


def cache_key(family: str, **kw: Any) -> str:
    """Directory name :func:`cached_model` uses: ``<family>-<hash>``.

    The hash covers the build parameters (defaults filled in; unknown ones raise ``TypeError``),
    :data:`FACTORY_VERSION`, the torch/transformers/tokenizers versions (their code shapes the
    files) and the corpus the tokenizer is trained on.
    """
    signature = _BENCH_SIGNATURE if family == BENCH_FAMILY else _TINY_SIGNATURE
    params = signature.bind_partial(**kw)  # TypeError on unknown keywords
    params.apply_defaults()
    payload = {
        "family": family,
        "kw": {k: v for k, v in sorted(params.arguments.items()) if k != "out_dir"},
        "factory_version": FACTORY_VERSION,
        "versions": _versions(),
        "corpus_sha256": hashlib.sha256(CORPUS_PATH.read_bytes()).hexdigest(),
    }
    digest = hashlib.sha256(json.dumps(payload, sort_keys=True).encode()).hexdigest()[:16]
    return f"{family}-{digest}"


def cached_model(family: str, cache_root: Path, **kw: Any) -> Path:
    """Return ``cache_root/<family>-<hash>``, building the model there first if it is missing.

    ``family`` is one of :data:`FAMILIES` (``kw`` forwarded to :func:`build_tiny_model`) or
    :data:`BENCH_FAMILY` (``kw`` forwarded to :func:`build_bench_llama`). The model is built in a
    temporary sibling directory and renamed into place, so an interrupted build never appears
    valid; concurrent builders (e.g. pytest-xdist workers) are safe, the first rename wins.
    """
    if family != BENCH_FAMILY and family not in FAMILIES:
        raise ValueError(
            f"unknown model family {family!r}; known families: "
            f"{', '.join(FAMILIES)} (and {BENCH_FAMILY!r})"
        )
    cache_root = Path(cache_root)
    final = cache_root / cache_key(family, **kw)
    if final.is_dir():
        return final
    cache_root.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".tmp-{final.name}-", dir=cache_root))
    try:
        if family == BENCH_FAMILY:
            build_bench_llama(tmp, **kw)
        else:
            build_tiny_model(family, tmp, **kw)
        try:
            os.rename(tmp, final)
        except OSError:
            if not final.is_dir():  # not a lost race: a real error
                raise
            log.debug("%s was built concurrently; discarding our copy", final)
    finally:
        if tmp.exists():
            shutil.rmtree(tmp, ignore_errors=True)
    return final
