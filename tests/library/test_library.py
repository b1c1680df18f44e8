"""The model library without the app: each place laid out as its tool lays it out, holding tiny
real models; what it finds, what it says of each model and why one cannot be used, which exports
are of which model, and that describing a model never reads its weights."""

from __future__ import annotations

import json
import os
import struct
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest
from library_support import Places, lay_out

from fleetgui.library import Format, Library, LibraryRoots, ModelEntry, Source, default_roots
from fleetgui.library.entry import parameters_text, size_text
from fleetgui.library.parameters import estimate_parameters

pytest.importorskip("gguf")


@pytest.fixture(scope="module")
def model(tiny_models: Callable[..., Path]) -> Path:
    return tiny_models("llama")


@pytest.fixture(scope="module")
def places(model: Path, tmp_path_factory: pytest.TempPathFactory) -> Places:
    return lay_out(tmp_path_factory.mktemp("places"), model)


@pytest.fixture(scope="module")
def entries(places: Places) -> dict[Path, ModelEntry]:
    return {e.path: e for e in Library().scan(places.roots)}


def weights_of(model: Path) -> int:
    """Parameters of the tiny model, counted from its weights (what the library must report
    without loading them)."""
    from safetensors.numpy import load_file

    return sum(int(np.prod(a.shape)) for a in load_file(str(model / "model.safetensors")).values())


def test_every_place_is_found_with_what_its_model_is(
    places: Places, entries: dict[Path, ModelEntry], model: Path
) -> None:
    parameters = weights_of(model)
    hf = entries[places.hf_snapshot]
    assert (hf.name, hf.source, hf.format) == (
        "acme/tiny-llama",
        Source.HF_CACHE,
        Format.HUGGINGFACE,
    )
    assert (hf.architecture, hf.n_parameters, hf.quantization) == ("llama", parameters, "F32")
    # the snapshot's files are links to blobs: the size is the blobs'
    assert hf.size_bytes == sum(f.stat().st_size for f in model.iterdir() if f.is_file())
    lm = entries[places.lmstudio_gguf]
    assert (lm.name, lm.source, lm.format) == ("tiny-llama-Q8_0", Source.LM_STUDIO, Format.GGUF)
    assert (lm.architecture, lm.n_parameters, lm.quantization) == ("llama", parameters, "Q8_0")
    assert lm.size_bytes == places.lmstudio_gguf.stat().st_size
    ollama = entries[places.ollama_blob]
    assert (ollama.name, ollama.source, ollama.format) == (
        "tiny:latest",
        Source.OLLAMA,
        Format.GGUF,
    )
    assert (ollama.architecture, ollama.n_parameters) == ("llama", parameters)
    folder = entries[places.folder_model]
    assert folder.source is Source.FOLDER and folder.origin == places.roots.folders[0]
    for entry in (hf, lm, ollama, folder):
        assert entry.supported, entry.problem
        assert entry.exports == ()
    names = {e.name for e in entries.values()}
    assert not any(n.startswith("mmproj") for n in names)  # a vision projector is no model
    usable = [e.supported for e in Library().scan(places.roots)]
    assert usable == sorted(usable, reverse=True)  # the usable ones first


def test_each_model_that_cannot_be_used_says_why(
    places: Places, entries: dict[Path, ModelEntry]
) -> None:
    problems = {path: entries[path].problem or "" for path in (
        places.hf_unsupported, places.lmstudio_bad_quant, places.lmstudio_bad_arch,
        places.ollama_missing)}  # fmt: skip
    assert "model_type 'bloom' is not supported" in problems[places.hf_unsupported]
    assert "llama" in problems[places.hf_unsupported]  # ... and which ones are
    assert "blk.1.ffn_up.weight is quantized as Q8_1" in problems[places.lmstudio_bad_quant]
    assert "Use another quantization" in problems[places.lmstudio_bad_quant]
    assert "GGUF architecture 'bloom' is not supported" in problems[places.lmstudio_bad_arch]
    assert "missing" in problems[places.ollama_missing]
    assert entries[places.ollama_missing].name == "gone:latest"
    assert entries[places.hf_unsupported].architecture == "bloom"  # still described


def test_a_pytorch_only_or_pre_quantized_model_says_what_to_do(model: Path, tmp_path: Path) -> None:
    import shutil

    bins = tmp_path / "models" / "old"
    shutil.copytree(model, bins)
    (bins / "model.safetensors").rename(bins / "pytorch_model.bin")
    gptq = tmp_path / "models" / "gptq"
    shutil.copytree(model, gptq)
    config = json.loads((gptq / "config.json").read_text())
    config["quantization_config"] = {"quant_method": "gptq", "bits": 4}
    (gptq / "config.json").write_text(json.dumps(config))
    found = {e.name: e for e in Library().scan(LibraryRoots(folders=(tmp_path / "models",)))}
    assert "convert them to safetensors" in (found["old"].problem or "")
    assert found["old"].n_parameters == estimate_parameters(config)  # from the config
    assert "pre-quantized (gptq)" in (found["gptq"].problem or "")
    assert found["gptq"].quantization == "gptq"


def test_an_export_is_listed_and_linked_to_the_model_it_was_made_from(
    places: Places, model: Path, tmp_path: Path
) -> None:
    from runtime_support import export

    exports = tmp_path / "exports"
    made = export(places.hf_snapshot, exports / "tiny-llama-fp32-1s", stages=1)
    (exports / ".tiny-llama-int4-2s.partial").mkdir()  # an unfinished one: not listed
    roots = LibraryRoots(hf_hub=places.roots.hf_hub, lmstudio=places.roots.lmstudio,
                         exports=exports)  # fmt: skip
    found = {e.path: e for e in Library().scan(roots)}
    listed = found[made]
    assert (listed.source, listed.format, listed.name) == (
        Source.EXPORT, Format.EXPORT, "tiny-llama-fp32-1s")  # fmt: skip
    assert (listed.architecture, listed.quantization) == ("llama", "fp32")
    assert listed.n_parameters == weights_of(model)  # computed from its config
    assert found[places.hf_snapshot].exports == (made,)
    # the GGUF holds the same weights but is another model to the exporter: not its export
    assert found[places.lmstudio_gguf].exports == ()
    assert not any(p.name.startswith(".") for p in found)


def test_a_rescan_reads_only_the_models_that_changed(
    places: Places, monkeypatch: pytest.MonkeyPatch
) -> None:
    from fleetgui.library import scan

    read: list[Path] = []
    for name in ("hf_facts", "gguf_facts"):
        original = getattr(scan, name)
        monkeypatch.setattr(scan, name, lambda path, _f=original: (read.append(path), _f(path))[1])
    library = Library()
    first = library.scan(places.roots)
    assert len(read) == len(first)
    read.clear()
    assert library.scan(places.roots) == first and read == []
    config = places.folder_model / "config.json"
    stat = config.stat()
    os.utime(config, ns=(stat.st_atime_ns, stat.st_mtime_ns + 1_000_000_000))
    library.scan(places.roots)
    assert read == [places.folder_model]


def _sparse_safetensors(folder: Path, config: dict) -> None:
    """A BF16 model of ``config``'s shape whose tensor data is a hole (a sparse file): its
    header is real, its weights are never written."""
    hidden, inter = config["hidden_size"], config["intermediate_size"]
    shapes = {"model.embed_tokens.weight": [config["vocab_size"], hidden],
              "lm_head.weight": [config["vocab_size"], hidden]}  # fmt: skip
    for layer in range(config["num_hidden_layers"]):
        for name, shape in (("self_attn.q_proj", [hidden, hidden]),
                            ("self_attn.k_proj", [hidden, hidden]),
                            ("self_attn.v_proj", [hidden, hidden]),
                            ("self_attn.o_proj", [hidden, hidden]),
                            ("mlp.gate_proj", [inter, hidden]), ("mlp.up_proj", [inter, hidden]),
                            ("mlp.down_proj", [hidden, inter])):  # fmt: skip
            shapes[f"model.layers.{layer}.{name}.weight"] = shape
    header, offset = {}, 0
    for name, shape in shapes.items():
        size = shape[0] * shape[1] * 2
        header[name] = {"dtype": "BF16", "shape": shape, "data_offsets": [offset, offset + size]}
        offset += size
    raw = json.dumps(header).encode()
    path = folder / "model.safetensors"
    with path.open("wb") as handle:
        handle.write(struct.pack("<Q", len(raw)) + raw)
        handle.truncate(8 + len(raw) + offset)


def _sparse_gguf(path: Path, hidden: int, layers: int, vocab: int, inter: int) -> None:
    """A Q4_K_M Llama GGUF of that shape whose tensor data is a hole (a sparse file)."""
    import gguf

    writer = gguf.GGUFWriter(str(path), "llama")
    writer.add_block_count(layers)
    writer.add_embedding_length(hidden)
    writer.add_file_type(gguf.LlamaFileType.MOSTLY_Q4_K_M)
    writer.add_tokenizer_model("llama")
    writer.add_token_list([f"t{i}" for i in range(vocab)])
    writer.add_token_scores([0.0] * vocab)
    writer.add_token_types([1] * vocab)
    kind = gguf.GGMLQuantizationType.Q4_K
    block, size = gguf.GGML_QUANT_SIZES[kind]
    shapes = [("token_embd.weight", (vocab, hidden)), ("output.weight", (vocab, hidden))]
    for layer in range(layers):
        shapes += [(f"blk.{layer}.attn_{n}.weight", (hidden, hidden)) for n in "qkvo"]
        shapes += [(f"blk.{layer}.ffn_{n}.weight", (inter, hidden)) for n in ("gate", "up")]
        shapes += [(f"blk.{layer}.ffn_down.weight", (hidden, inter))]
    data = 0
    for name, (rows, cols) in shapes:
        nbytes = rows * cols // block * size
        writer.add_tensor_info(name, (rows, cols), np.dtype(np.float32), nbytes, raw_dtype=kind)
        data += -(-nbytes // 32) * 32  # each tensor's data is aligned to 32 bytes
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_ti_data_to_file()
    writer.close()
    os.truncate(path, -(-path.stat().st_size // 32) * 32 + data)


def test_an_80b_model_is_described_in_seconds_without_reading_its_weights(
    model: Path, tmp_path: Path
) -> None:
    """An 80B HF folder (160 GB of BF16) and GGUF (45 GB of Q4_K) whose weights are
    holes: reading them, let alone loading them, would take minutes; describing both takes
    seconds and gets the parameter counts from the headers."""
    import shutil

    big = {"model_type": "llama", "hidden_size": 8192, "intermediate_size": 28672,
           "num_hidden_layers": 80, "num_attention_heads": 64, "num_key_value_heads": 64,
           "vocab_size": 128256, "torch_dtype": "bfloat16"}  # fmt: skip
    hf = tmp_path / "models" / "big-llama"
    hf.mkdir(parents=True)
    (hf / "config.json").write_text(json.dumps(big))
    shutil.copy(model / "tokenizer.json", hf / "tokenizer.json")
    _sparse_safetensors(hf, big)
    gguf_path = tmp_path / "models" / "big-llama-Q4_K_M.gguf"
    _sparse_gguf(gguf_path, 8192, 80, 128256, 28672)
    assert (hf / "model.safetensors").stat().st_size > 100e9
    started = time.monotonic()
    try:
        found = {e.path: e for e in Library().scan(LibraryRoots(folders=(tmp_path / "models",)))}
    finally:
        elapsed = time.monotonic() - started
        shutil.rmtree(tmp_path / "models")  # huge if ever copied, though holes now
    assert elapsed < 20, f"describing took {elapsed:.1f} s"
    norms = (2 * 80 + 1) * 8192  # in the estimate, not among the tensors written
    expected = (estimate_parameters(big) or 0) - norms
    assert found[hf].n_parameters == expected and found[hf].quantization == "BF16"
    assert found[hf].supported, found[hf].problem
    assert found[gguf_path].n_parameters == expected
    assert found[gguf_path].quantization == "Q4_K_M"
    assert parameters_text(expected) == "80B" and size_text(int(160e9)) == "160 GB"


def test_default_places_follow_the_environment(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("FLEETGUI_SCAN_HOME")
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "hub"))
    monkeypatch.setenv("OLLAMA_MODELS", str(tmp_path / "ollama"))
    roots = default_roots(["~/models"], exports=tmp_path / "exports")
    assert roots.hf_hub == tmp_path / "hub" and roots.ollama == tmp_path / "ollama"
    assert roots.lmstudio == (tmp_path / "home" / ".lmstudio" / "models",
                              tmp_path / "home" / ".cache" / "lm-studio" / "models")  # fmt: skip
    assert roots.folders == (tmp_path / "home" / "models",)
    assert roots.views == tmp_path / "exports" / "gguf"
    monkeypatch.delenv("HF_HUB_CACHE")
    monkeypatch.delenv("OLLAMA_MODELS")
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf"))
    roots = default_roots()
    assert roots.hf_hub == tmp_path / "hf" / "hub"
    assert roots.ollama == tmp_path / "home" / ".ollama" / "models"
    monkeypatch.setenv("FLEETGUI_SCAN_HOME", str(tmp_path / "other"))  # tests, portable
    roots = default_roots()
    assert roots.hf_hub == tmp_path / "other" / ".cache" / "huggingface" / "hub"
    assert roots.ollama == tmp_path / "other" / ".ollama" / "models"


def test_the_fast_header_reader_reads_what_the_gguf_package_reads(places: Places) -> None:
    from gguf import GGUFReader

    from fleetgui.export.gguf_source import GGUFSourceError, check_quantization, read_fields
    from fleetgui.library.gguf_header import ArrayField, read_header

    for path in (places.lmstudio_gguf, places.lmstudio_bad_quant, places.ollama_blob):
        reader, header = GGUFReader(str(path)), read_header(path)
        fields = read_fields(reader)
        for key, value in header.fields.items():
            expected = fields[key]
            assert (
                value.count == len(expected) if isinstance(value, ArrayField) else value == expected
            ), key
        assert set(header.fields) == set(fields) - {"GGUF.version", "GGUF.tensor_count",
                                                     "GGUF.kv_count"}  # fmt: skip
        assert len(header.tensors) == len(reader.tensors)
        for mine, theirs in zip(header.tensors, reader.tensors, strict=True):
            assert (mine.name, mine.tensor_type, mine.data_offset, mine.n_bytes) == (
                theirs.name, theirs.tensor_type, theirs.data_offset, theirs.n_bytes)  # fmt: skip
            assert mine.shape == tuple(int(d) for d in theirs.shape)
            assert np.array_equal(np.asarray(mine.data[:1]), np.asarray(theirs.data[:1]))
    with pytest.raises(GGUFSourceError, match="quantized as Q8_1"):
        check_quantization(read_header(places.lmstudio_bad_quant))
    not_gguf = places.hf_snapshot / "config.json"
    with pytest.raises(GGUFSourceError, match="not a GGUF file"):
        read_header(not_gguf.resolve())


def test_the_demo_entry_says_what_using_it_will_do(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from fleetgui.library.demo import demo_entry, demo_export_dir

    monkeypatch.setenv("FLEETGUI_HOME", str(tmp_path / "home"))  # nothing fetched there
    exports = tmp_path / "exports"
    entry = demo_entry(exports)
    assert (entry.source, entry.supported, entry.exports) == (Source.DEMO, True, ())
    assert "fetches it once from PyPI" in entry.note and entry.size_bytes == 0
    made = demo_export_dir(exports)
    made.mkdir(parents=True)
    (made / "manifest.json").write_text("{}")
    entry = demo_entry(exports)
    assert entry.exports == (made,) and entry.note == "exported and ready to deploy"
