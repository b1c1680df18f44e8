"""A HuggingFace model folder on disk: validation, identity and weight sizes, without loading it.

Everything here reads ``config.json``, the safetensors headers and a few bytes of each tensor
(:data:`SAMPLE_BYTES` at its start, middle and end, for the model's identity), so it is cheap even
for a 70B model.
"""

from __future__ import annotations

import hashlib
import json
import logging
import struct
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from fleetgui.errors import FleetguiError

log = logging.getLogger(__name__)

#: Bytes of each tensor, at its start, middle and end, that go into the model's identity: a
#: retrained or fine-tuned model saved over the old one (same names and shapes) must not reuse
#: the old one's shards, and shards of the two must never be mixed in one pipeline.
SAMPLE_BYTES = 64

SAFETENSORS_INDEX = "model.safetensors.index.json"
SAFETENSORS_SINGLE = "model.safetensors"
TOKENIZER_FILES = (
    "tokenizer.json",
    "tokenizer_config.json",
    "special_tokens_map.json",
    "tokenizer.model",
    "vocab.json",
    "merges.txt",
    "added_tokens.json",
    "chat_template.jinja",
)
GENERATION_CONFIG = "generation_config.json"
_DTYPE_BYTES = {"F64": 8, "F32": 4, "F16": 2, "BF16": 2, "I64": 8, "I32": 4, "I8": 1, "U8": 1}
_MAX_HEADER_BYTES = 100_000_000


class ModelSourceError(FleetguiError):
    """The model folder is missing, incomplete or corrupt."""


@dataclass(frozen=True)
class TensorInfo:
    """Where one weight tensor lives and how big it is."""

    file: Path
    dtype: str
    shape: tuple[int, ...]

    @property
    def n_elements(self) -> int:
        count = 1
        for dim in self.shape:
            count *= dim
        return count

    @property
    def n_bytes(self) -> int:
        return self.n_elements * _DTYPE_BYTES.get(self.dtype, 4)


@dataclass(frozen=True)
class ModelSource:
    """A validated HuggingFace decoder model folder."""

    path: Path
    config: dict[str, Any]
    tensors: dict[str, TensorInfo]  # weight name -> location, from the safetensors headers
    identity_hash: str  # sha256: config.json; each weight's name, dtype, shape and sampled bytes

    @property
    def name(self) -> str:
        return str(self.config.get("_name_or_path") or self.path.name)

    @property
    def model_id(self) -> str:
        """``name@hash12``: the identity every shard of this model carries."""
        return f"{self.name}@{self.identity_hash[:12]}"

    @property
    def model_type(self) -> str:
        return str(self.config.get("model_type", ""))

    @property
    def n_layers(self) -> int:
        return int(self.config["num_hidden_layers"])

    @property
    def hidden_size(self) -> int:
        return int(self.config["hidden_size"])

    @property
    def vocab_size(self) -> int:
        return int(self.config["vocab_size"])

    @property
    def n_parameters(self) -> int:
        return sum(t.n_elements for t in self.tensors.values())

    @property
    def weight_bytes(self) -> int:
        return sum(t.n_bytes for t in self.tensors.values())

    def layer_parameters(self, layer: int) -> int:
        """Parameters of decoder layer ``layer`` (to size stages and plan memory)."""
        prefix = f"model.layers.{layer}."
        return sum(t.n_elements for name, t in self.tensors.items() if name.startswith(prefix))

    def tokenizer_files(self) -> list[Path]:
        return [self.path / name for name in TOKENIZER_FILES if (self.path / name).is_file()]

    @property
    def tokenizer_hash(self) -> str:
        """sha256 of the tokenizer files, chat template and generation config: what the export's
        tokenizer folder is made from (the weights' identity is :attr:`identity_hash`)."""
        digest = hashlib.sha256()
        for path in [*self.tokenizer_files(), self.path / GENERATION_CONFIG]:
            if path.is_file():
                digest.update(path.name.encode() + b"\0" + path.read_bytes() + b"\0")
        return digest.hexdigest()


def read_safetensors_header(path: Path) -> dict[str, Any]:
    """The JSON header of a safetensors file, with its length checked before it is read."""
    return _read_header(path)[0]


def _read_header(path: Path) -> tuple[dict[str, Any], int]:
    """:func:`read_safetensors_header` and the file offset where the tensors' data starts."""
    try:
        with path.open("rb") as handle:
            raw = handle.read(8)
            if len(raw) != 8:
                raise ModelSourceError(f"{path} is truncated: no safetensors header")
            (length,) = struct.unpack("<Q", raw)
            if length > _MAX_HEADER_BYTES or length > path.stat().st_size - 8:
                raise ModelSourceError(f"{path} is corrupt: header length {length} is impossible")
            header = json.loads(handle.read(length))
    except (OSError, ValueError) as exc:
        raise ModelSourceError(f"cannot read weights {path}: {exc}") from exc
    if not isinstance(header, dict):
        raise ModelSourceError(f"{path} is corrupt: its header is not a JSON object")
    return header, 8 + length


def weight_files(path: Path) -> list[Path]:
    """The safetensors files of the model folder ``path``; ``ModelSourceError`` naming what is
    missing (no safetensors, only PyTorch ``.bin`` weights, files an index names)."""
    index = path / SAFETENSORS_INDEX
    if index.is_file():
        try:
            weight_map = json.loads(index.read_text(encoding="utf-8"))["weight_map"]
        except (OSError, ValueError, KeyError) as exc:
            raise ModelSourceError(f"{index} is corrupt ({exc}); re-download the model") from exc
        files = sorted({path / name for name in weight_map.values()})
    elif (path / SAFETENSORS_SINGLE).is_file():
        files = [path / SAFETENSORS_SINGLE]
    else:
        bins = sorted(path.glob("pytorch_model*.bin"))
        hint = (
            " It has PyTorch .bin weights: convert them to safetensors first "
            "(load and save_pretrained(..., safe_serialization=True))."
            if bins
            else ""
        )
        raise ModelSourceError(
            f"{path} has no safetensors weights "
            f"({SAFETENSORS_SINGLE} or {SAFETENSORS_INDEX}).{hint}"
        )
    missing = [f.name for f in files if not f.is_file()]
    if missing:
        raise ModelSourceError(
            f"{path} is incomplete: weight files {', '.join(missing)} are missing"
        )
    return files


def _digest_samples(digest: Any, file: Path, base: int, spans: list[tuple[int, int]]) -> None:
    """Add :data:`SAMPLE_BYTES` from the start, middle and end of each tensor's data (``spans``
    are data offsets, relative to ``base``)."""
    try:
        with file.open("rb") as handle:
            for begin, end in spans:
                middle = (begin + end) // 2
                for offset in sorted({begin, middle, max(begin, end - SAMPLE_BYTES)}):
                    handle.seek(base + offset)
                    digest.update(handle.read(min(SAMPLE_BYTES, end - offset)))
    except OSError as exc:
        raise ModelSourceError(f"cannot read weights {file}: {exc}") from exc


def _open_gguf_view(path: Path, config: dict[str, Any], config_bytes: bytes) -> ModelSource:
    """A GGUF file's view folder: weights described from the view's tensor table (fp32 sizes,
    as the export dequantizes them), identity from the GGUF file's own."""
    from fleetgui.export.gguf_source import read_view

    view = read_view(path)
    gguf = Path(view["gguf"])
    tensors = {
        name: TensorInfo(gguf, "F32", tuple(int(d) for d in shape))
        for name, (_, _, shape) in view["tensors"].items()
    }
    digest = hashlib.sha256(config_bytes + str(view["identity"]).encode())
    return ModelSource(path, config, tensors, digest.hexdigest())


def open_model_source(path: Path) -> ModelSource:
    """Validate a model source and describe it, reading only headers: a HuggingFace model
    folder, a ``.gguf`` file or a folder holding one, or a hub id
    (:func:`fleetgui.export.sources.resolve_model`)."""
    from fleetgui.export.sources import resolve_model

    path = resolve_model(path)
    if not path.is_dir():
        raise ModelSourceError(f"model folder {path} does not exist or is not a folder")
    config_path = path / "config.json"
    if not config_path.is_file():
        raise ModelSourceError(f"{path} is not a HuggingFace model folder: config.json is missing")
    try:
        config_bytes = config_path.read_bytes()
        config = json.loads(config_bytes)
    except (OSError, ValueError) as exc:
        raise ModelSourceError(f"{config_path} is not valid JSON ({exc})") from exc
    for key in ("model_type", "num_hidden_layers", "hidden_size", "vocab_size"):
        if key not in config:
            raise ModelSourceError(f"{config_path} lacks {key!r}: is this a decoder LLM?")

    from fleetgui.export.gguf_source import is_gguf_view

    if is_gguf_view(path):
        return _open_gguf_view(path, config, config_bytes)
    digest = hashlib.sha256(config_bytes)
    tensors: dict[str, TensorInfo] = {}
    for file in weight_files(path):
        header, base = _read_header(file)
        data_bytes = file.stat().st_size - base  # the tensors' data, after the header
        spans: list[tuple[int, int]] = []
        for name, entry in sorted(header.items()):
            if name == "__metadata__":
                continue
            try:
                info = TensorInfo(file, str(entry["dtype"]), tuple(int(d) for d in entry["shape"]))
                begin, end = (int(x) for x in entry["data_offsets"])
            except (KeyError, TypeError, ValueError, IndexError) as exc:
                raise ModelSourceError(f"{file} is corrupt: bad entry for {name}") from exc
            if end > data_bytes:
                raise ModelSourceError(
                    f"{file} is truncated: tensor {name} ends at byte {end} of {data_bytes}; "
                    "re-download or re-save the model"
                )
            tensors[name] = info
            digest.update(f"{name}:{info.dtype}:{info.shape}".encode())
            spans.append((begin, end))
        _digest_samples(digest, file, base, spans)
    if not tensors:
        raise ModelSourceError(f"{path} has weight files but no tensors in them")
    source = ModelSource(path, config, tensors, digest.hexdigest())
    log.debug(
        "model %s: %s, %d layers, %d parameters",
        path,
        source.model_type,
        source.n_layers,
        source.n_parameters,
    )
    return source
