"""GGUF files and hub ids as export sources: a GGUF written at test time (llama.cpp's layout) is
exported and exact against transformers' own loading of it; its tokenizer is rebuilt from its
metadata; a stage reads only its own tensors; bad files get one clear line; hub ids resolve from
an HF cache laid out at test time, offline."""

from __future__ import annotations

import json
import shutil
from collections.abc import Callable
from pathlib import Path

import pytest
from cli_support import run_cli
from gguf_support import CHATML, write_llama_gguf

from fleetgui.export.gguf_source import GGUFCheckpoint, GGUFSourceError, prepare_gguf
from fleetgui.export.sources import ModelNotFoundError, resolve_model
from fleetgui.shard import Shard

pytestmark = pytest.mark.slow

SAMPLES = (
    "def add(a, b):\n    return a + b\n",
    "The quick brown fox jumps over the lazy dog.",
    "<|bos|>x = 1<|eos|>",
)


def _mixed(name: str) -> str:
    """Quantize the big matrices as Q8_0 (the export must dequantize them like transformers),
    keep norms and the embedding fp32/fp16."""
    if name.endswith("norm.weight"):
        return "F32"
    if name == "token_embd.weight":
        return "F16"
    return "Q8_0"


@pytest.fixture(scope="module")
def tiny_gguf(tiny_models: Callable[..., Path], tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("gguf")
    return write_llama_gguf(tiny_models("llama"), folder / "tiny-llama.Q8_0.gguf", quantize=_mixed)


@pytest.fixture(scope="module")
def view(tiny_gguf: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    return prepare_gguf(tiny_gguf, tmp_path_factory.mktemp("views"))


def test_the_rebuilt_tokenizer_gives_the_source_tokenizers_ids(
    view: Path, tiny_models: Callable[..., Path]
) -> None:
    from transformers import AutoTokenizer

    source = AutoTokenizer.from_pretrained(tiny_models("llama"))
    rebuilt = AutoTokenizer.from_pretrained(view)
    for text in SAMPLES:
        assert rebuilt(text)["input_ids"] == source(text)["input_ids"], text
        ids = source(text)["input_ids"]
        assert rebuilt.decode(ids) == source.decode(ids)
    config = json.loads((view / "tokenizer_config.json").read_text())
    assert config["chat_template"] == CHATML
    assert config["bos_token"] == "<|bos|>" and config["eos_token"] == "<|eos|>"


def test_a_gguf_export_is_exact_against_transformers_loading_the_same_file(
    tiny_gguf: Path, tmp_path: Path
) -> None:
    """fp32 stages from the GGUF's dequantized tensors reproduce transformers' own GGUF loading
    (logits and greedy tokens, verify's check); the export carries the file's template."""
    out = tmp_path / "export"
    done = run_cli(
        None, "export", str(tiny_gguf), "--out", str(out), "--stages", "2", "--weights", "fp32"
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert "PASS" in done.stderr
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["architecture"] == "llama" and len(manifest["stages"]) == 2
    assert manifest["model_name"] == "tiny-llama.Q8_0"
    template = json.loads((out / "tokenizer" / "tokenizer_config.json").read_text())
    assert template["chat_template"] == CHATML


def test_transformers_loads_a_gguf_with_each_tensor_name_map_built_once(tiny_gguf: Path) -> None:
    """``load_gguf_model`` gives transformers' own GGUF loading's weights, and gguf-py builds its
    tensor name map once per load, not once per module."""
    import gguf
    import torch
    from transformers import AutoModelForCausalLM

    from fleetgui.export.transformers_gguf import load_gguf_model, share_tensor_name_maps

    plain = AutoModelForCausalLM.from_pretrained(
        str(tiny_gguf.parent), gguf_file=tiny_gguf.name, dtype=torch.float32
    )
    built = []
    original = gguf.get_tensor_name_map

    def counting(arch: object, n_blocks: int) -> object:
        built.append((arch, n_blocks))
        return original(arch, n_blocks)  # type: ignore[arg-type]

    gguf.get_tensor_name_map = counting  # type: ignore[assignment]
    try:
        model = load_gguf_model(AutoModelForCausalLM, tiny_gguf, dtype=torch.float32)
        share_tensor_name_maps()  # idempotent: the shared one stays
        load_gguf_model(AutoModelForCausalLM, tiny_gguf, dtype=torch.float32)
    finally:
        gguf.get_tensor_name_map = original
    assert len(built) == 1 and len(list(model.modules())) > 10
    assert not model.training
    state = plain.state_dict()
    for name, tensor in model.state_dict().items():
        assert torch.equal(tensor, state[name]), name


def test_a_stage_reads_only_its_own_tensors(view: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from fleetgui.export.stage_module import build_stage_module

    read: list[str] = []
    original = GGUFCheckpoint.get

    def recording(self: GGUFCheckpoint, key: str) -> object:
        read.append(key)
        return original(self, key)

    monkeypatch.setattr(GGUFCheckpoint, "get", recording)
    build_stage_module(view, Shard("m", 2, 4, 4))
    layers = {int(k.split(".")[2]) for k in read if k.startswith("model.layers.")}
    assert layers == {2, 3}
    assert "model.embed_tokens.weight" not in read  # untied lm_head: the embedding stays unread
    assert {"model.norm.weight", "lm_head.weight"} <= set(read)


def test_plan_takes_a_gguf_file(tiny_gguf: Path, tmp_path: Path) -> None:
    device = {"memory_bytes": 8_000_000_000, "ms_per_layer": 1.0, "disk_read_bytes_per_s": 1e9,
              "rtt_ms": 1.0, "bandwidth_bytes_per_s": 1e8}  # fmt: skip
    devices = tmp_path / "devices.json"
    devices.write_text(json.dumps([{"name": "a", **device}, {"name": "b", **device}]))
    done = run_cli(None, "plan", str(tiny_gguf), "--devices", str(devices), "--json")
    assert done.returncode == 0, done.stderr[-2000:]
    plan = json.loads(done.stdout)
    assert plan["devices"][-1]["end_layer"] == 4


def test_an_unsupported_architecture_is_one_clear_line(
    tiny_models: Callable[..., Path], tmp_path: Path
) -> None:
    bad = write_llama_gguf(tiny_models("llama"), tmp_path / "m.gguf", architecture="bloom")
    done = run_cli(None, "export", str(bad), "--out", str(tmp_path / "out"))
    assert done.returncode == 1
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and "'bloom'" in lines[0] and "llama" in lines[0], done.stderr
    assert not (tmp_path / "out").exists()


def test_an_unsupported_quantization_names_the_type(
    tiny_models: Callable[..., Path], tmp_path: Path
) -> None:
    bad = write_llama_gguf(
        tiny_models("llama"),
        tmp_path / "m.gguf",
        quantize=lambda name: "Q8_1" if name == "blk.1.ffn_up.weight" else "F32",
    )
    with pytest.raises(GGUFSourceError, match=r"blk\.1\.ffn_up\.weight is quantized as Q8_1"):
        prepare_gguf(bad, tmp_path / "views")


def test_a_folder_with_one_gguf_file_is_that_file(tiny_gguf: Path, tmp_path: Path) -> None:
    folder = tmp_path / "lmstudio"
    folder.mkdir()
    shutil.copy(tiny_gguf, folder / tiny_gguf.name)
    resolved = resolve_model(folder, gguf_cache=tmp_path / "views")
    assert (resolved / "gguf_view.json").is_file()
    shutil.copy(tiny_gguf, folder / "other.gguf")
    with pytest.raises(ModelNotFoundError, match="holds 2 GGUF files"):
        resolve_model(folder, gguf_cache=tmp_path / "views")


def _hf_cache(root: Path, repo_id: str, model_dir: Path) -> Path:
    """``root`` laid out as huggingface_hub's cache holding ``repo_id`` at one commit."""
    repo = root / f"models--{repo_id.replace('/', '--')}"
    commit = "0123456789abcdef0123456789abcdef01234567"
    snapshot = repo / "snapshots" / commit
    shutil.copytree(model_dir, snapshot)
    (repo / "refs").mkdir(parents=True)
    (repo / "refs" / "main").write_text(commit)
    return snapshot


def test_a_hub_id_resolves_from_the_local_cache_offline(
    tiny_models: Callable[..., Path], tmp_path: Path
) -> None:
    cache = tmp_path / "hf" / "hub"
    snapshot = _hf_cache(cache, "acme/tiny-llama", tiny_models("llama"))
    env = {"HF_HUB_OFFLINE": "1", "HF_HOME": str(tmp_path / "hf"), "HF_HUB_CACHE": str(cache)}
    out = tmp_path / "export"
    done = run_cli(
        None,
        "export",
        "acme/tiny-llama",
        "--out",
        str(out),
        "--weights",
        "fp32",
        "--no-verify",
        env=env,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    manifest = json.loads((out / "manifest.json").read_text())
    assert (
        manifest["n_layers"]
        == json.loads((snapshot / "config.json").read_text())["num_hidden_layers"]
    )

    missing = run_cli(None, "export", "acme/not-there", "--out", str(tmp_path / "x"), env=env)
    assert missing.returncode == 1
    line = missing.stderr.strip().splitlines()[-1]
    assert "acme/not-there is not in the HuggingFace cache" in line
    assert "HF_HUB_OFFLINE" in line and "hf download acme/not-there" in line


def test_a_changed_chat_template_reaches_a_reexport_without_verify(
    tiny_models: Callable[..., Path], tmp_path: Path
) -> None:
    from fleetgui.export.exporter import ExportRequest, export_model

    model = tmp_path / "model"
    shutil.copytree(tiny_models("llama"), model)
    out = tmp_path / "export"
    first = export_model(ExportRequest(model, out, stages=2, weights="fp32"))
    config_path = model / "tokenizer_config.json"
    config = json.loads(config_path.read_text())
    config["chat_template"] = CHATML
    config_path.write_text(json.dumps(config))
    second = export_model(ExportRequest(model, out, stages=2, weights="fp32"))
    assert second.tokenizer_hash != first.tokenizer_hash
    assert [s.key for s in second.stages] == [s.key for s in first.stages]  # stages reused
    exported = json.loads((out / "tokenizer" / "tokenizer_config.json").read_text())
    assert exported["chat_template"] == CHATML


def test_a_sentencepiece_gguf_tokenizer_is_rebuilt_and_exported(
    tiny_models: Callable[..., Path], tmp_path: Path
) -> None:
    """Llama 2 / Gemma style GGUF vocabularies (pieces with scores, byte fallback, a space
    prefix) are rebuilt as BPE that gives the SentencePiece-trained tokenizer's ids; the model
    then exports and verifies like any other."""
    from gguf_support import spm_vocab
    from model_factory import CORPUS_PATH
    from transformers import AutoTokenizer

    path = write_llama_gguf(tiny_models("llama"), tmp_path / "spm.gguf", sentencepiece=True)
    view = prepare_gguf(path, tmp_path / "views")
    rebuilt = AutoTokenizer.from_pretrained(view)
    _, _, _, trained = spm_vocab(CORPUS_PATH, 512)
    bos = rebuilt.convert_tokens_to_ids("<s>")
    for text in ("def add(a, b):\n    return a + b", "The quick brown fox.", "x  =  1"):
        assert rebuilt(text)["input_ids"] == [bos, *trained.encode(text).ids], text
        assert rebuilt.decode(rebuilt(text)["input_ids"], skip_special_tokens=True) == text
    unseen = rebuilt("é€", add_special_tokens=False)["input_ids"]  # not in the vocabulary
    assert all(rebuilt.convert_ids_to_tokens(i).startswith("<0x") for i in unseen[1:])
    assert rebuilt.decode(unseen) == " é€".lstrip()
    out = tmp_path / "export"
    done = run_cli(
        None, "export", str(path), "--out", str(out), "--stages", "2", "--weights", "fp32"
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert "PASS" in done.stderr
