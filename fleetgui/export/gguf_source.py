"""A GGUF file (from Ollama, LM Studio, llama.cpp) as a model source for export.

A GGUF file is turned once into a small *view* folder in the shard cache: ``config.json`` (from
the file's metadata, through transformers' GGUF support), the tokenizer rebuilt from the file's own
vocabulary (:mod:`fleetgui.export.gguf_tokenizer`), ``generation_config.json`` with the chat
format's end-of-turn tokens, and :data:`VIEW_FILE`, which maps every HuggingFace weight name to
its tensor in the GGUF file. The weights stay in the GGUF file: :class:`GGUFCheckpoint` reads and
dequantizes one tensor at a time from the memory-mapped file, so exporting one stage touches only
that stage's tensors.
"""

from __future__ import annotations

import hashlib
import json
import logging
import re
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from fleetgui.errors import FleetguiError
from fleetgui.fsutil import atomic_write_text

if TYPE_CHECKING:
    from fleetgui.export.gguf_tokenizer import GGUFVocab

log = logging.getLogger(__name__)

VIEW_FILE = "gguf_view.json"
VIEW_VERSION = 2  # bump when a view's contents change, so old views are rebuilt
SAMPLE_BYTES = 64  # bytes of each tensor, at its start, middle and end, in the file's identity
#: GGUF ``general.architecture`` values fleetgui exports (the transformers model type follows).
SUPPORTED_ARCHITECTURES = ("gemma2", "gemma3", "llama", "mistral", "phi3", "qwen2", "qwen3")
GGUF_MAGIC = b"GGUF"  # a GGUF file's first bytes


class GGUFSourceError(FleetguiError):
    """The GGUF file cannot be used: unreadable, or an architecture or quantization fleetgui
    does not support."""


def _install_hint() -> str:
    return "install the export extra: pip install 'fleetgui[export]'"


def is_gguf_file(path: Path) -> bool:
    """Whether ``path`` is a GGUF file: by its ``.gguf`` name or, for files named otherwise
    (Ollama's blobs are ``sha256-<hex>``), by its first bytes."""
    path = Path(path)
    if not path.is_file():
        return False
    if path.suffix.lower() == ".gguf":
        return True
    try:
        with path.open("rb") as handle:
            return handle.read(len(GGUF_MAGIC)) == GGUF_MAGIC
    except OSError:
        return False


def model_name(path: Path, fields: dict[str, Any]) -> str:
    """The name a GGUF file's model goes by: the file's stem, or for a file not named
    ``*.gguf`` (an Ollama blob) its ``general.name``, which says more than a hash."""
    if path.suffix.lower() == ".gguf":
        return path.stem
    name = str(fields.get("general.name", "")).strip()
    return re.sub(r"[^\w.+-]+", "-", name).strip("-") or path.name


def open_reader(path: Path) -> Any:
    """The gguf package's reader of ``path``: memory-mapped, so only what is read is loaded."""
    try:
        from gguf import GGUFReader
    except ImportError as exc:
        raise GGUFSourceError(
            f"reading GGUF files needs the gguf package: {_install_hint()}"
        ) from exc
    try:
        return GGUFReader(str(path), "r")
    except (OSError, ValueError, KeyError, IndexError) as exc:
        raise GGUFSourceError(f"{path} is not a readable GGUF file ({exc})") from exc


def read_fields(reader: Any) -> dict[str, Any]:
    """The file's metadata as ``{key: value}`` (fields that cannot be decoded are left out)."""
    out: dict[str, Any] = {}
    for key, field in reader.fields.items():
        try:
            out[key] = field.contents()
        except (ValueError, IndexError, UnicodeDecodeError):  # a field we never read
            continue
    return out


def file_identity(path: Path, reader: Any) -> str:
    """sha256 of the file's header (metadata and tensor table) and sampled bytes of every
    tensor: cheap for a 40 GB file, and changes when the file is replaced by another."""
    digest = hashlib.sha256(str(path.stat().st_size).encode())
    tensors = sorted(reader.tensors, key=lambda t: int(t.data_offset))
    header_end = int(tensors[0].data_offset) if tensors else path.stat().st_size
    with path.open("rb") as handle:
        digest.update(handle.read(header_end))
        for tensor in tensors:
            begin, size = int(tensor.data_offset), int(tensor.n_bytes)
            for offset in sorted({begin, begin + size // 2, begin + max(0, size - SAMPLE_BYTES)}):
                handle.seek(offset)
                digest.update(handle.read(min(SAMPLE_BYTES, size)))
    return digest.hexdigest()


def check_quantization(reader: Any) -> None:
    """Every tensor's type must dequantize with the gguf package: try one row of each type."""
    from gguf import dequantize

    tried: dict[str, bool] = {}
    for tensor in reader.tensors:
        kind = tensor.tensor_type.name
        if kind in tried:
            continue
        try:
            dequantize(np.asarray(tensor.data[:1]), tensor.tensor_type)
            tried[kind] = True
        except (NotImplementedError, ValueError) as exc:
            raise GGUFSourceError(
                f"tensor {tensor.name} is quantized as {kind}, which the gguf package cannot "
                f"dequantize ({exc}); supported: F32, F16, BF16, Q4_0, Q4_1, Q5_0, Q5_1, Q8_0 and "
                "the K-quants (Q2_K-Q6_K). Use another quantization of the model"
            ) from exc


def _hf_config(path: Path, architecture: str, name: str) -> dict[str, Any]:
    from fleetgui.torch_env import hide_torchvision

    hide_torchvision()
    from transformers import AutoConfig

    try:
        config = AutoConfig.from_pretrained(str(path.parent), gguf_file=path.name)
    except (ValueError, KeyError) as exc:
        raise GGUFSourceError(
            f"{path}: transformers cannot read this GGUF file's {architecture!r} configuration "
            f"({exc}); supported GGUF architectures: {', '.join(SUPPORTED_ARCHITECTURES)}"
        ) from exc
    data: dict[str, Any] = config.to_dict()
    data["_name_or_path"] = name
    data["architectures"] = [type(config).__name__.replace("Config", "ForCausalLM")]
    return data


def _weight_map(config_data: dict[str, Any], architecture: str) -> dict[str, str]:
    """HuggingFace weight name -> GGUF tensor name, from transformers' own GGUF name table."""
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM
    from transformers.modeling_gguf_pytorch_utils import (
        TENSOR_PROCESSORS,
        TensorProcessor,
        get_gguf_hf_weights_map,
    )

    fields = {k: v for k, v in config_data.items() if k not in ("model_type", "_name_or_path")}
    config = AutoConfig.for_model(config_data["model_type"], **fields)
    with torch.device("meta"):
        skeleton = AutoModelForCausalLM.from_config(config)
    processor = TENSOR_PROCESSORS.get(architecture, TensorProcessor)(config=config_data)
    gguf_to_hf = get_gguf_hf_weights_map(skeleton, processor)
    return {hf: gguf for gguf, hf in gguf_to_hf.items()}


def _tensor_table(reader: Any, weight_map: dict[str, str], tied: bool) -> dict[str, Any]:
    """``{hf_name: [gguf_name, type, shape]}`` for every weight the model needs."""
    by_name = {t.name: t for t in reader.tensors}
    table: dict[str, Any] = {}
    missing: list[str] = []
    for hf_name, gguf_name in sorted(weight_map.items()):
        tensor = by_name.get(gguf_name)
        if tensor is None:
            if not (tied and hf_name == "lm_head.weight"):
                missing.append(f"{gguf_name} ({hf_name})")
            continue
        shape = [int(d) for d in reversed([int(x) for x in tensor.shape])]
        table[hf_name] = [gguf_name, tensor.tensor_type.name, shape]
    if missing:
        raise GGUFSourceError(
            f"the GGUF file lacks tensors the model needs: {', '.join(missing[:5])}"
            f"{' ...' if len(missing) > 5 else ''}"
        )
    return table


def view_folder(
    path: Path, identity: str, cache_root: Path | None = None, *, name: str | None = None
) -> Path:
    """Where the view of the GGUF file ``path`` with ``identity`` lives (``name``: the model's,
    :func:`model_name`; the file's stem by default)."""
    from fleetgui.paths import shards_cache_dir

    root = cache_root if cache_root is not None else shards_cache_dir() / "gguf"
    return root / f"{name or path.stem}-{identity[:12]}"


def is_gguf_view(folder: Path) -> bool:
    return (Path(folder) / VIEW_FILE).is_file()


def read_view(folder: Path) -> dict[str, Any]:
    """The view's :data:`VIEW_FILE`, checked against the GGUF file it names."""
    data: dict[str, Any] = json.loads((Path(folder) / VIEW_FILE).read_text(encoding="utf-8"))
    gguf = Path(data["gguf"])
    if not gguf.is_file():
        raise GGUFSourceError(
            f"{folder} is the view of {gguf}, which no longer exists; export the GGUF file again"
        )
    if gguf.stat().st_size != int(data["size"]):
        raise GGUFSourceError(f"{gguf} changed since {folder} was made; export the GGUF file again")
    return data


def prepare_gguf(path: Path, cache_root: Path | None = None) -> Path:
    """The view folder of the GGUF file ``path`` (made once, then reused while the file is
    unchanged). Raises ``GGUFSourceError`` (or the tokenizer's error) naming what is wrong."""
    path = Path(path).expanduser().resolve()
    if not path.is_file():
        raise GGUFSourceError(f"GGUF file {path} does not exist")
    reader = open_reader(path)
    identity = file_identity(path, reader)
    fields = read_fields(reader)
    name = model_name(path, fields)
    folder = view_folder(path, identity, cache_root, name=name)
    view = folder / VIEW_FILE
    if view.is_file():
        try:
            data = json.loads(view.read_text(encoding="utf-8"))
            if data.get("version") == VIEW_VERSION and data.get("gguf") == str(path):
                return folder
        except ValueError:
            pass
    architecture = str(fields.get("general.architecture", ""))
    if architecture not in SUPPORTED_ARCHITECTURES:
        raise GGUFSourceError(
            f"{path.name}: GGUF architecture {architecture!r} is not supported; supported: "
            f"{', '.join(SUPPORTED_ARCHITECTURES)}"
        )
    check_quantization(reader)
    from fleetgui.export.architectures import adapter_for
    from fleetgui.export.gguf_tokenizer import GGUFVocab, end_of_turn_ids, write_tokenizer_files

    config = _hf_config(path, architecture, name)
    from types import SimpleNamespace

    adapter_for(SimpleNamespace(**config))  # an architecture the exporter cannot split: fail now
    vocab = with_chat_format(GGUFVocab.from_fields(fields), architecture)
    folder.mkdir(parents=True, exist_ok=True)
    write_tokenizer_files(vocab, folder)
    generation = {"bos_token_id": vocab.bos_id, "eos_token_id": end_of_turn_ids(vocab)}
    atomic_write_text(folder / "generation_config.json", json.dumps(generation, indent=2))
    config["eos_token_id"] = generation["eos_token_id"]
    atomic_write_text(folder / "config.json", json.dumps(config, indent=2, sort_keys=True))
    table = _tensor_table(
        reader, _weight_map(config, architecture), bool(config.get("tie_word_embeddings"))
    )
    record = {
        "version": VIEW_VERSION,
        "gguf": str(path),
        "size": path.stat().st_size,
        "identity": identity,
        "architecture": architecture,
        "tensors": table,
    }
    atomic_write_text(view, json.dumps(record))  # last: a view without it is rebuilt
    log.info("GGUF %s: view in %s (%d tensors)", path.name, folder, len(table))
    return folder


def with_chat_format(vocab: GGUFVocab, architecture: str) -> GGUFVocab:
    """``vocab`` with its family's built-in chat format when the file has no template (base
    builds): without one the chat would be a plain transcript with no end-of-turn token, which
    such a model continues to the token limit. See :mod:`fleetgui.export.chat_formats`."""
    from fleetgui.export.chat_formats import PLAIN, detect_format

    if vocab.chat_template:
        return vocab
    found = detect_format(architecture, vocab.tokens, sentencepiece=vocab.model == "llama")
    if found is None:
        log.info("the GGUF file has no chat template and no known chat format: plain transcript")
        return replace(vocab, chat_format=PLAIN)
    log.info("the GGUF file has no chat template: using the %s chat format", found.label)
    return replace(vocab, chat_template=found.template, chat_format=found.name)


class GGUFCheckpoint:
    """One tensor at a time from a GGUF file, dequantized to fp32 and in HuggingFace layout."""

    def __init__(self, folder: Path) -> None:
        from transformers.modeling_gguf_pytorch_utils import TENSOR_PROCESSORS, TensorProcessor

        self.folder = Path(folder)
        self.view = read_view(self.folder)
        self.path = Path(self.view["gguf"])
        config = json.loads((self.folder / "config.json").read_text(encoding="utf-8"))
        processor_class = TENSOR_PROCESSORS.get(self.view["architecture"], TensorProcessor)
        self._processor = processor_class(config=config)
        self._reader: Any = None
        self._by_name: dict[str, Any] = {}

    def __contains__(self, key: str) -> bool:
        return key in self.view["tensors"]

    def get(self, key: str) -> Any:
        """The fp32 torch tensor of HuggingFace weight ``key``."""
        import torch
        from gguf import dequantize

        from fleetgui.export.stage_module import CheckpointError

        entry = self.view["tensors"].get(key)
        if entry is None:
            raise CheckpointError(f"tensor {key!r} is not in the GGUF file {self.path}")
        if self._reader is None:
            self._reader = open_reader(self.path)
            self._by_name = {t.name: t for t in self._reader.tensors}
        tensor = self._by_name[entry[0]]
        weights = dequantize(tensor.data, tensor.tensor_type)
        weights = self._processor.process(weights=weights, name=tensor.name).weights
        weights = np.ascontiguousarray(weights, dtype=np.float32).reshape(entry[2])
        if not weights.flags.writeable:  # an F32 tensor is a view of the read-only file
            weights = weights.copy()
        return torch.from_numpy(weights)
