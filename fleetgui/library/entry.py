"""One model of the library, as the app lists it."""

from __future__ import annotations

import enum
from dataclasses import dataclass
from pathlib import Path


class Source(enum.Enum):
    """Where a model was found."""

    DEMO = "demo"
    HF_CACHE = "HuggingFace cache"
    LM_STUDIO = "LM Studio"
    OLLAMA = "Ollama"
    FOLDER = "added folder"
    EXPORT = "fleetgui export"


class Format(enum.Enum):
    """How a model is stored."""

    HUGGINGFACE = "HuggingFace"  # config.json and safetensors
    GGUF = "GGUF"
    EXPORT = "OpenVINO export"  # fleetgui's own: manifest.json and per-stage IR


@dataclass(frozen=True)
class Candidate:
    """A model a source found, before its metadata is read."""

    name: str
    source: Source
    format: Format
    path: Path  # the HF folder, GGUF file or export folder
    origin: Path | None = None  # the added folder it was found under (Source.FOLDER)


@dataclass(frozen=True)
class ModelFacts:
    """What a model's metadata says. ``problem`` is why fleetgui cannot use it, or None."""

    architecture: str = ""
    n_parameters: int | None = None
    quantization: str = ""
    problem: str | None = None
    n_layers: int | None = None  # with hidden_size: which exports could be of this model
    hidden_size: int | None = None


@dataclass(frozen=True)
class ModelEntry:
    """A row of the library."""

    name: str
    source: Source
    format: Format
    path: Path
    facts: ModelFacts
    size_bytes: int = 0  # on disk; 0 when not there yet (the demo before it is fetched)
    exports: tuple[Path, ...] = ()  # fleetgui exports made of this model, newest first
    origin: Path | None = None  # the added folder it was found under
    note: str = ""  # anything else the user should know (the demo: what using it fetches)

    @property
    def supported(self) -> bool:
        return self.facts.problem is None

    @property
    def problem(self) -> str | None:
        return self.facts.problem

    @property
    def architecture(self) -> str:
        return self.facts.architecture

    @property
    def quantization(self) -> str:
        return self.facts.quantization

    @property
    def n_parameters(self) -> int | None:
        return self.facts.n_parameters


def parameters_text(count: int | None) -> str:
    """``135M``, ``1.2B``; ``?`` when unknown."""
    if count is None or count <= 0:
        return "?"
    for unit, size in (("T", 1e12), ("B", 1e9), ("M", 1e6), ("K", 1e3)):
        if count >= size:
            value = count / size
            return f"{value:.1f}{unit}" if value < 10 else f"{value:.0f}{unit}"
    return str(count)


def size_text(n_bytes: int) -> str:
    """``812 MB``, ``4.1 GB`` (decimal units, as file managers show them); ``—`` for none."""
    if n_bytes <= 0:
        return "—"
    for unit, size in (("TB", 1e12), ("GB", 1e9), ("MB", 1e6), ("KB", 1e3)):
        if n_bytes >= size:
            value = n_bytes / size
            return f"{value:.1f} {unit}" if value < 10 else f"{value:.0f} {unit}"
    return f"{n_bytes} B"
