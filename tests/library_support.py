"""Model places laid out at test time as the tools that own them lay them out: a HuggingFace hub
cache (snapshot files are links to content-addressed blobs), LM Studio's ``publisher/repo/
file.gguf`` folders and Ollama's store (manifests naming ``sha256-HEX`` blobs), holding tiny
real models (``model_factory``) and GGUFs written from them (``gguf_support``)."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
from dataclasses import dataclass
from pathlib import Path

from gguf_support import write_llama_gguf

from fleetgui.library import LibraryRoots

COMMIT = "0123456789abcdef0123456789abcdef01234567"


def hf_cache_repo(hub: Path, repo_id: str, files: Path) -> Path:
    """``files`` (a folder) as ``repo_id`` at one commit in the hub cache ``hub``, each file a
    relative link to its blob, as huggingface_hub stores them; returns the snapshot."""
    repo = hub / f"models--{repo_id.replace('/', '--')}"
    snapshot = repo / "snapshots" / COMMIT
    (repo / "blobs").mkdir(parents=True, exist_ok=True)
    snapshot.mkdir(parents=True, exist_ok=True)
    for file in sorted(p for p in files.rglob("*") if p.is_file()):
        digest = hashlib.sha256(file.read_bytes()).hexdigest()
        blob = repo / "blobs" / digest
        shutil.copyfile(file, blob)
        link = snapshot / file.relative_to(files)
        link.parent.mkdir(parents=True, exist_ok=True)
        link.symlink_to(os.path.relpath(blob, link.parent))
    (repo / "refs").mkdir(exist_ok=True)
    (repo / "refs" / "main").write_text(COMMIT)
    return snapshot


def ollama_model(store: Path, name: str, tag: str, gguf: Path | None) -> Path:
    """A pulled Ollama model ``name:tag`` whose model layer is ``gguf`` (moved into the blobs;
    None: a manifest whose blob is gone); returns the blob path."""
    blobs = store / "blobs"
    blobs.mkdir(parents=True, exist_ok=True)
    digest = hashlib.sha256(gguf.read_bytes() if gguf else name.encode()).hexdigest()
    blob = blobs / f"sha256-{digest}"
    if gguf is not None:
        shutil.move(gguf, blob)
    manifest = store / "manifests" / "registry.ollama.ai" / "library" / name / tag
    manifest.parent.mkdir(parents=True, exist_ok=True)
    layers = [
        {"mediaType": "application/vnd.ollama.image.model", "digest": f"sha256:{digest}",
         "size": blob.stat().st_size if gguf else 0},
        {"mediaType": "application/vnd.ollama.image.template", "digest": "sha256:" + "0" * 64,
         "size": 10},
    ]  # fmt: skip
    config = {"mediaType": "application/vnd.docker.container.image.v1+json",
              "digest": "sha256:" + "1" * 64, "size": 10}  # fmt: skip
    manifest.write_text(json.dumps({"schemaVersion": 2, "config": config, "layers": layers}))
    return blob


def with_model_type(model: Path, out: Path, model_type: str) -> Path:
    """A copy of the HF folder ``model`` claiming another ``model_type``."""
    shutil.copytree(model, out)
    config = json.loads((out / "config.json").read_text())
    (out / "config.json").write_text(json.dumps({**config, "model_type": model_type}))
    return out


def q8(name: str) -> str:
    """Q8_0 for the 2-D weights that gguf can quantize, F32 for the norms (as llama.cpp)."""
    return "F32" if "norm" in name else "Q8_0"


@dataclass(frozen=True)
class Places:
    """Every place laid out, and the paths the tests look for."""

    roots: LibraryRoots
    hf_snapshot: Path  # acme/tiny-llama
    hf_unsupported: Path  # acme/tiny-bloom: a model_type without an export adapter
    lmstudio_gguf: Path  # Q8_0
    lmstudio_bad_quant: Path  # one tensor in Q8_1, which gguf cannot dequantize
    lmstudio_bad_arch: Path  # general.architecture "bloom"
    ollama_blob: Path  # tiny:latest
    ollama_missing: Path  # gone:latest, whose blob is not there
    folder_model: Path  # an HF folder inside a folder the user added


def lay_out(root: Path, model: Path) -> Places:
    """Every place under ``root``, from the tiny HF Llama folder ``model``."""
    hub = root / "home" / ".cache" / "huggingface" / "hub"
    snapshot = hf_cache_repo(hub, "acme/tiny-llama", model)
    bloom = with_model_type(model, root / "staging" / "bloom", "bloom")
    unsupported = hf_cache_repo(hub, "acme/tiny-bloom", bloom)
    lmstudio = root / "home" / ".lmstudio" / "models" / "acme" / "tiny-llama-GGUF"
    lmstudio.mkdir(parents=True)
    gguf = write_llama_gguf(model, lmstudio / "tiny-llama-Q8_0.gguf", quantize=q8)
    shutil.copyfile(gguf, lmstudio / "mmproj-tiny-llama-f16.gguf")  # a projector: not listed
    bad_quant = write_llama_gguf(
        model,
        lmstudio / "tiny-llama-Q8_1.gguf",
        quantize=lambda name: "Q8_1" if name == "blk.1.ffn_up.weight" else "F32",
    )
    bad_arch = write_llama_gguf(model, lmstudio / "tiny-bloom.gguf", architecture="bloom")
    store = root / "home" / ".ollama" / "models"
    staged = write_llama_gguf(model, root / "staging" / "ollama.gguf")
    blob = ollama_model(store, "tiny", "latest", staged)
    missing = ollama_model(store, "gone", "latest", None)
    added = root / "my models"
    folder_model = added / "nested" / "tiny-llama-copy"
    shutil.copytree(model, folder_model)
    roots = LibraryRoots(
        hf_hub=hub,
        lmstudio=(root / "home" / ".lmstudio" / "models",),
        ollama=store,
        folders=(added,),
        exports=root / "exports",
    )
    return Places(roots, snapshot, unsupported, gguf, bad_quant, bad_arch, blob, missing,
                  folder_model)  # fmt: skip
