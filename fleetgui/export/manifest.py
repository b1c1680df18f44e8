"""``manifest.json``: what an export folder holds, with a hash for every file.

The manifest is written last, after every file it names, and replaced atomically: a folder with
a manifest whose hashes match is a complete export.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from fleetgui.errors import FleetguiError
from fleetgui.export.quality import ExportQuality
from fleetgui.fsutil import atomic_write_text, inside_path, sha256_file
from fleetgui.shard import Shard

FORMAT_VERSION = 1
MANIFEST_NAME = "manifest.json"
TOKENIZER_DIR = "tokenizer"


class ManifestError(FleetguiError):
    """The export folder is missing its manifest, or a file does not match it."""


def check_relative(path: str) -> str:
    """``path`` if it names a file inside the export folder, else ValueError: a manifest with
    ``..`` or an absolute path made the coordinator read and upload a file from elsewhere."""
    try:
        inside_path(path)
    except ValueError:
        raise ValueError(f"file path {path!r} leaves the export folder") from None
    return path


@dataclass(frozen=True)
class FileEntry:
    path: str  # relative to the export folder, with forward slashes
    sha256: str
    size: int

    def __post_init__(self) -> None:
        check_relative(self.path)

    @classmethod
    def of(cls, root: Path, path: Path) -> FileEntry:
        return cls(path.relative_to(root).as_posix(), sha256_file(path), path.stat().st_size)


@dataclass(frozen=True)
class ManifestStage:
    """A stage as ``manifest.json`` stores it; its layers as a value: :meth:`Manifest.shard`."""

    index: int
    start_layer: int  # start/end: the JSON form, kept so every export loads
    end_layer: int
    files: tuple[FileEntry, ...]
    inputs: tuple[str, ...]
    outputs: tuple[str, ...]
    kv_states: tuple[str, ...]
    key: str = ""  # hash of everything the stage was built from (reuse when it still matches)
    parts: tuple[str, ...] = ()  # the stage's IR files in order, when exported in chunks

    def __post_init__(self) -> None:
        for part in self.parts:
            check_relative(part)

    @property
    def model_files(self) -> tuple[str, ...]:
        """The stage's OpenVINO models, run one after another (one unless chunked)."""
        return self.parts or tuple(f.path for f in self.files if f.path.endswith(".xml"))

    @property
    def model_file(self) -> str:
        return self.model_files[0]

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> ManifestStage:
        return cls(
            index=int(data["index"]),
            start_layer=int(data["start_layer"]),
            end_layer=int(data["end_layer"]),
            files=tuple(FileEntry(**f) for f in data["files"]),
            inputs=tuple(data["inputs"]),
            outputs=tuple(data["outputs"]),
            kv_states=tuple(data["kv_states"]),
            key=str(data.get("key", "")),
            parts=tuple(data.get("parts", ())),
        )


@dataclass(frozen=True)
class Manifest:
    """The parsed ``manifest.json`` of an export folder."""

    model_name: str
    model_hash: str
    architecture: str
    n_layers: int
    hidden_size: int
    vocab_size: int
    weight_format: str
    stages: tuple[ManifestStage, ...]
    tokenizer_files: tuple[FileEntry, ...] = ()
    layout: str = "stages"  # "stages", or "monolithic" (also an openvino_genai folder)
    config: dict[str, Any] = field(default_factory=dict)  # the source model's config.json
    format_version: int = FORMAT_VERSION
    fleetgui_version: str = ""
    # sha256 of the source's tokenizer, chat template and generation config: a fixed tokenizer
    # makes a re-export rebuild the tokenizer folder even when every stage is reused
    tokenizer_hash: str = ""
    # how close the export came to its model when last verified; None: never verified (or a
    # manifest written before verification recorded it)
    quality: ExportQuality | None = None

    @property
    def model_id(self) -> str:
        return f"{self.model_name}@{self.model_hash[:12]}"

    def shard(self, index: int) -> Shard:
        """The layers of the stage at ``index``."""
        stage = self.stages[index]
        return Shard(self.model_id, stage.start_layer, stage.end_layer, self.n_layers)

    @property
    def shards(self) -> list[Shard]:
        """The layers of every stage, in order."""
        return [self.shard(i) for i in range(len(self.stages))]

    def to_json(self) -> str:
        return json.dumps(asdict(self), indent=2, sort_keys=False) + "\n"

    def write(self, folder: Path) -> None:
        atomic_write_text(Path(folder) / MANIFEST_NAME, self.to_json())

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Manifest:
        version = data.get("format_version")
        if version != FORMAT_VERSION:
            raise ManifestError(
                f"manifest format version {version} is not {FORMAT_VERSION}: re-export the "
                "model with this fleetgui version"
            )
        stages = tuple(ManifestStage.from_dict(s) for s in data["stages"])
        parsed = ("stages", "tokenizer_files", "quality")
        fields = {k: v for k, v in data.items() if k not in parsed}
        tokenizer = tuple(FileEntry(**f) for f in data.get("tokenizer_files", ()))
        quality = data.get("quality")
        return cls(
            stages=stages,
            tokenizer_files=tokenizer,
            quality=None if quality is None else ExportQuality.from_dict(quality),
            **fields,
        )


def read_manifest(folder: Path) -> Manifest:
    """Read ``folder/manifest.json``; a clear error if it is missing or malformed."""
    path = Path(folder) / MANIFEST_NAME
    if not path.is_file():
        raise ManifestError(
            f"{folder} is not a fleetgui export (no {MANIFEST_NAME}); create one with "
            "'fleetgui export MODEL_DIR --out DIR'"
        )
    try:
        return Manifest.from_dict(json.loads(path.read_text(encoding="utf-8")))
    except (ValueError, KeyError, TypeError) as exc:
        raise ManifestError(f"{path} is malformed ({exc}); re-export the model") from exc


def check_files(folder: Path, entries: tuple[FileEntry, ...]) -> list[str]:
    """Names of the files that are missing or whose size or sha256 differ from the manifest."""
    bad: list[str] = []
    for entry in entries:
        path = Path(folder) / entry.path
        if (
            not path.is_file()
            or path.stat().st_size != entry.size
            or sha256_file(path) != entry.sha256
        ):
            bad.append(entry.path)
    return bad
