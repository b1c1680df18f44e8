"""Per-stage stateful OpenVINO export (``fleetgui.export.stage_export``) against HF transformers.

Real OpenVINO on CPU with exact precision hints (``INFERENCE_PRECISION_HINT=f32``,
``KV_CACHE_PRECISION=f32``): chained 2- and 3-stage exports of every tiny model family must give
HF's fp32 logits (within 1e-4) and greedy tokens for a prefill and 32 decode steps; mask-based
KV rewind must match a run that never saw the rejected tokens; and the CPU plugin must fuse each
layer's attention with its KV state only when the stage has the beam_idx Gather.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest

ov = pytest.importorskip("openvino")
torch = pytest.importorskip("torch")

from fleetgui.torch_env import hide_torchvision  # noqa: E402

hide_torchvision()
transformers = pytest.importorskip("transformers")

from model_factory import FAMILIES  # noqa: E402

from fleetgui.export.architectures import (  # noqa: E402
    UnsupportedArchitectureError,
    adapter_for,
    supported_model_types,
)
from fleetgui.export.stage_export import export_stage  # noqa: E402
from fleetgui.export.stage_module import (  # noqa: E402
    CheckpointError,
    attention_bias,
    build_stage_module,
)
from fleetgui.export.stateful import fused_attention_nodes  # noqa: E402
from fleetgui.shard import Shard  # noqa: E402

EXACT = {"INFERENCE_PRECISION_HINT": "f32", "KV_CACHE_PRECISION": "f32"}
SPLITS = {"2": ((0, 2), (2, 4)), "3": ((0, 2), (2, 3), (3, 4))}
PROMPT = [0, 17, 305, 42, 99, 256, 7, 411, 63, 128]  # 10 tokens (BOS first)
DECODE_STEPS = 32
ATOL = 1e-4
EAGER_FAMILIES = {"gemma2"}  # attention logit soft-capping: eager attention, no SDPA op


@pytest.fixture(scope="session")
def model_dir(tiny_models: Callable[..., Path]) -> Callable[[str], Path]:
    """``get(family) -> Path``: the tiny 4-layer model of ``family`` (built once per session)."""
    return tiny_models


@pytest.fixture(scope="session")
def compiled_stage(
    model_dir: Callable[[str], Path], tmp_path_factory: pytest.TempPathFactory
) -> Callable[..., tuple[Any, Any]]:
    """``get(family, start, end, gather=True) -> (compiled model, StageIO)``, exported once."""
    core = ov.Core()
    out = tmp_path_factory.mktemp("stages")
    cache: dict[tuple[str, int, int, bool], tuple[Any, Any]] = {}

    def get(family: str, start: int, end: int, gather: bool = True) -> tuple[Any, Any]:
        key = (family, start, end, gather)
        if key not in cache:
            xml = out / f"{family}_{start}_{end}_{int(gather)}.xml"
            shard = Shard(family, start, end, 4)
            io = export_stage(model_dir(family), shard, xml, beam_idx_gather=gather)
            cache[key] = (core.compile_model(xml, "CPU", EXACT), io)
        return cache[key]

    return get


class Chain:
    """One sequence through a list of compiled stages (one InferRequest each)."""

    def __init__(self, stages: list[tuple[Any, Any]]) -> None:
        self.stages = stages
        self.requests = [compiled.create_infer_request() for compiled, _ in stages]
        for request in self.requests:
            request.reset_state()

    def step(self, ids: list[int], mask: list[int], positions: list[int]) -> dict[str, np.ndarray]:
        data: np.ndarray = np.array([ids], dtype=np.int64)
        common = {
            "attention_mask": np.array([mask], dtype=np.int64),
            "position_ids": np.array([positions], dtype=np.int64),
        }
        for (_, io), request in zip(self.stages, self.requests, strict=True):
            feed = {io.inputs[0]: data, **common}
            if "beam_idx" in io.inputs:
                feed["beam_idx"] = np.zeros(1, dtype=np.int32)
            request.infer(feed)
            if "hidden_out" in io.outputs:
                data = request.get_tensor("hidden_out").data.copy()
        last = self.requests[-1]
        return {name: last.get_tensor(name).data.copy() for name in self.stages[-1][1].outputs}


def _hf_model(path: Path) -> Any:
    config = transformers.AutoConfig.from_pretrained(path)
    return transformers.AutoModelForCausalLM.from_pretrained(
        path,
        dtype=torch.float32,
        attn_implementation=adapter_for(config).attn_implementation(config),
    ).eval()


@pytest.fixture(scope="session")
def hf_reference(model_dir: Callable[[str], Path]) -> Callable[[str], tuple[list, list[int]]]:
    """``get(family) -> (logits per step, greedy tokens)``: prefill then 32 greedy steps in HF."""
    cache: dict[str, tuple[list, list[int]]] = {}

    def get(family: str) -> tuple[list, list[int]]:
        if family not in cache:
            model = _hf_model(model_dir(family))
            past = transformers.DynamicCache(config=model.config)
            ids = torch.tensor([PROMPT])
            logits_per_step, tokens = [], []
            with torch.no_grad():
                for _ in range(DECODE_STEPS + 1):
                    out = model(input_ids=ids, past_key_values=past, use_cache=True)
                    logits_per_step.append(out.logits[0].numpy())
                    token = int(out.logits[0, -1].argmax())
                    tokens.append(token)
                    ids = torch.tensor([[token]])
            cache[family] = (logits_per_step, tokens)
        return cache[family]

    return get


@pytest.mark.slow
@pytest.mark.parametrize("split", sorted(SPLITS))
@pytest.mark.parametrize("family", FAMILIES)
def test_chain_matches_transformers(family: str, split: str, compiled_stage, hf_reference) -> None:
    ref_logits, ref_tokens = hf_reference(family)
    chain = Chain([compiled_stage(family, a, b) for a, b in SPLITS[split]])
    ids, pos, tokens, worst = PROMPT, list(range(len(PROMPT))), [], 0.0
    for step in range(DECODE_STEPS + 1):
        out = chain.step(ids, [1] * (pos[-1] + 1), pos)
        logits = out["logits"][0]
        assert logits.shape == ref_logits[step].shape
        worst = max(worst, float(np.abs(logits - ref_logits[step]).max()))
        np.testing.assert_array_equal(out["top1_ids"][0], logits.argmax(-1))
        shifted = np.exp(logits - logits.max(-1, keepdims=True))
        np.testing.assert_allclose(out["top1_probs"][0], 1 / shifted.sum(-1), rtol=1e-5)
        token = int(out["top1_ids"][0, -1])
        tokens.append(token)
        ids, pos = [token], [pos[-1] + 1]
    assert worst < ATOL, f"{family} {split}-stage: max |logit diff| {worst:.3g}"
    assert tokens == ref_tokens


@pytest.mark.slow
@pytest.mark.parametrize("family", ["llama", "gemma2", "gemma3"])
def test_mask_based_rewind(family: str, compiled_stage) -> None:
    stages = [compiled_stage(family, a, b) for a, b in SPLITS["2"]]
    n = len(PROMPT)
    prompt = {"ids": PROMPT, "mask": [1] * n, "positions": list(range(n))}
    rewound, clean = Chain(stages), Chain(stages)
    rewound.step(**prompt)
    clean.step(**prompt)
    rewound.step([300, 301], [1] * (n + 2), [n, n + 1])  # two draft tokens, then rejected
    mask = [1] * n + [0, 0]
    token, position = 55, n
    for _ in range(4):  # the correction, then keep decoding past the hole
        mask = [*mask, 1]
        got = rewound.step([token], mask, [position])["logits"]
        want = clean.step([token], [1] * (position + 1), [position])["logits"]
        np.testing.assert_allclose(got, want, atol=1e-5, rtol=0)
        token, position = int(want[0, -1].argmax()), position + 1


@pytest.mark.slow
@pytest.mark.parametrize("family", FAMILIES)
def test_fused_attention_per_stage(family: str, compiled_stage) -> None:
    expected_per_layer = 0 if family in EAGER_FAMILIES else 1
    for a, b in {*SPLITS["2"], *SPLITS["3"]}:
        compiled, io = compiled_stage(family, a, b)
        assert "beam_idx" in io.inputs
        assert fused_attention_nodes(compiled) == expected_per_layer * (b - a), (family, a, b)


@pytest.mark.slow
def test_no_fusion_without_beam_idx_gather(compiled_stage) -> None:
    for a, b in SPLITS["2"]:
        compiled, io = compiled_stage("llama", a, b, gather=False)
        assert "beam_idx" not in io.inputs
        assert fused_attention_nodes(compiled) == 0
    # Same numbers either way: the Gather only changes how the plugin executes the cache.
    plain = Chain([compiled_stage("llama", a, b, gather=False) for a, b in SPLITS["2"]])
    fused = Chain([compiled_stage("llama", a, b) for a, b in SPLITS["2"]])
    n = len(PROMPT)
    args = (PROMPT, [1] * n, list(range(n)))
    np.testing.assert_allclose(plain.step(*args)["logits"], fused.step(*args)["logits"], atol=1e-5)


@pytest.mark.slow
def test_stage_io_names(compiled_stage) -> None:
    compiled, io = compiled_stage("llama", 2, 3)
    assert io.inputs == ("hidden_in", "attention_mask", "position_ids", "beam_idx")
    assert io.outputs == ("hidden_out",)
    assert io.states == ("past_key_values.2.key", "past_key_values.2.value")
    assert [port.get_any_name() for port in compiled.inputs] == list(io.inputs)
    assert [port.get_any_name() for port in compiled.outputs] == list(io.outputs)
    request = compiled.create_infer_request()
    assert sorted(state.name for state in request.query_state()) == sorted(io.states)
    first_io = compiled_stage("llama", 0, 2)[1]
    assert first_io.inputs[0] == "input_ids"
    last, last_io = compiled_stage("llama", 3, 4)
    assert last_io.outputs == ("logits", "top1_ids", "top1_probs")
    types = {port.get_any_name(): port.get_element_type() for port in last.outputs}
    assert types == {"logits": ov.Type.f32, "top1_ids": ov.Type.i64, "top1_probs": ov.Type.f32}


def test_attention_bias_uses_positions() -> None:
    # 4 cached tokens, 2 rejected (masked), then the correction at position 4.
    mask = torch.tensor([[1, 1, 1, 1, 0, 0, 1]])
    bias = attention_bias(mask, torch.tensor([[4]]), window=None)[0, 0, 0]
    assert (bias == 0).tolist() == [True, True, True, True, False, False, True]
    windowed = attention_bias(mask, torch.tensor([[4]]), window=2)[0, 0, 0]
    assert (windowed == 0).tolist() == [False, False, False, True, False, False, True]


def test_unsupported_architecture_lists_supported() -> None:
    config = transformers.GPT2Config()
    with pytest.raises(UnsupportedArchitectureError) as info:
        adapter_for(config)
    for model_type in ("llama", "qwen2", "qwen3", "mistral", "phi3", "gemma2", "gemma3_text"):
        assert model_type in info.value.args[0]
    assert set(supported_model_types()) >= {"llama", "gemma2", "gemma3_text"}


def test_bidirectional_gemma3_is_refused() -> None:
    """EmbeddingGemma-style configs attend both ways: supported model_type, refused config."""
    import model_factory

    config = model_factory.make_config("gemma3")
    assert adapter_for(config).model_type == "gemma3_text"
    config.use_bidirectional_attention = True
    with pytest.raises(UnsupportedArchitectureError, match="use_bidirectional_attention"):
        adapter_for(config)


def test_gemma3_stage_rotates_each_layer_with_its_own_base(model_dir) -> None:
    """A stage holding a sliding and a full layer keeps one rotary table per layer type; a
    stage module built with the full layers' table for both differs, so the choice matters."""
    from fleetgui.export.stage_module import StageModule

    shard = Shard("gemma3", 0, 2, 4)
    module, _ = build_stage_module(model_dir("gemma3"), shard)
    assert module.rotary_keys == ["sliding_attention", "full_attention"]
    assert sorted(module.rotaries) == ["full_attention", "sliding_attention"]
    inputs = (torch.tensor([PROMPT]), torch.ones(1, 10, dtype=torch.int64), torch.arange(10)[None])
    past = [torch.zeros(1, 2, 0, 16)] * 4
    one_table = StageModule(
        shard=shard,
        layers=list(module.layers),
        windows=module.windows,
        rotary=module.rotaries["full_attention"],
        embed_weight=module.embed_weight.data,
        embed_scale=float(module.embed_scale),
        norm=None,
        lm_head=None,
        final_softcap=None,
    )
    with torch.no_grad():
        right, wrong = module(*inputs, *past)[0], one_table(*inputs, *past)[0]
    assert (right - wrong).abs().max() > 0.1


@pytest.mark.slow
def test_batch_of_two_matches_single_sequences(compiled_stage) -> None:
    stages = [compiled_stage("llama", a, b) for a, b in SPLITS["2"]]
    other = [5, 6, 7, 8, 9, 10, 11, 12, 13, 14]
    singles = [
        Chain(stages).step(ids, [1] * 10, list(range(10)))["logits"] for ids in (PROMPT, other)
    ]
    requests = [compiled.create_infer_request() for compiled, _ in stages]
    data: np.ndarray = np.array([PROMPT, other], dtype=np.int64)
    for (_, io), request in zip(stages, requests, strict=True):
        request.infer(
            {
                io.inputs[0]: data,
                "attention_mask": np.ones((2, 10), dtype=np.int64),
                "position_ids": np.tile(np.arange(10, dtype=np.int64), (2, 1)),
                "beam_idx": np.arange(2, dtype=np.int32),
            }
        )
        data = request.get_tensor(io.outputs[0]).data.copy()
    np.testing.assert_allclose(data, np.concatenate(singles), atol=1e-5)


def test_sharded_checkpoint_and_missing_tensor(model_dir, tmp_path: Path) -> None:
    from safetensors.torch import load_file, save_file

    source = model_dir("qwen2")  # tied embeddings: the last stage's lm_head is embed_tokens
    shard = Shard("qwen2", 2, 4, 4)
    reference, _ = build_stage_module(source, shard)
    model = _hf_model(source)
    sharded = tmp_path / "sharded"
    model.save_pretrained(sharded, max_shard_size="100KB")
    assert (sharded / "model.safetensors.index.json").is_file()
    streamed, _ = build_stage_module(sharded, shard)
    inputs = (torch.randn(1, 3, 64), torch.ones(1, 3, dtype=torch.int64), torch.arange(3)[None])
    past = [torch.zeros(1, 2, 0, 16)] * 4
    with torch.no_grad():
        torch.testing.assert_close(streamed(*inputs, *past)[0], reference(*inputs, *past)[0])
    broken = tmp_path / "broken"
    broken.mkdir()
    (broken / "config.json").write_bytes((source / "config.json").read_bytes())
    tensors = load_file(source / "model.safetensors")
    del tensors["model.layers.3.mlp.up_proj.weight"]
    save_file(tensors, broken / "model.safetensors")
    with pytest.raises(CheckpointError, match=r"model\.layers\.3\.mlp\.up_proj\.weight"):
        build_stage_module(broken, shard)
    build_stage_module(broken, Shard("qwen2", 0, 2, 4))  # a stage that does not need it loads


@pytest.mark.slow
def test_phi3_longrope_switches_factors_in_graph(tmp_path: Path) -> None:
    """Phi-3.5 style longrope: past original_max_position_embeddings the long factors apply."""
    import model_factory

    config = model_factory.make_config("phi3")
    config.rope_parameters = {
        "rope_type": "longrope",
        "rope_theta": 10000.0,
        "partial_rotary_factor": 0.5,
        "short_factor": [1.0, 1.1, 1.5, 2.0],
        "long_factor": [1.0, 2.0, 4.0, 8.0],
        "original_max_position_embeddings": 16,
    }
    config.original_max_position_embeddings = 16  # saved alongside; wins over rope_parameters
    model = transformers.AutoModelForCausalLM.from_config(config, dtype=torch.float32)
    model_factory._randomize_weights(model, 1, gain=model_factory.INIT_GAIN)  # sensitive weights
    model.save_pretrained(tmp_path / "model")
    model = _hf_model(tmp_path / "model")
    xml = tmp_path / "stage.xml"
    io = export_stage(tmp_path / "model", Shard("phi3-long", 0, 4, 4), xml)
    chain = Chain([(ov.Core().compile_model(xml, "CPU", EXACT), io)])
    past = transformers.DynamicCache(config=model.config)
    ids, pos = PROMPT, list(range(len(PROMPT)))
    with torch.no_grad():
        for _ in range(12):  # positions 10..21 cross the switch at 16
            want = model(input_ids=torch.tensor([ids]), past_key_values=past).logits[0].numpy()
            got = chain.step(ids, [1] * (pos[-1] + 1), pos)["logits"][0]
            np.testing.assert_allclose(got, want, atol=ATOL, rtol=0)
            ids, pos = [int(want[-1].argmax())], [pos[-1] + 1]
