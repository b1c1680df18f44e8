"""``fleetgui export``: a HuggingFace model folder to a complete, verified export folder.

The export is built in a hidden sibling folder (``.NAME.partial``) and renamed into place only
when every stage, the tokenizer and the manifest are written (and verified, unless told not to).
An interrupted export therefore never leaves a folder that looks valid, and running the same
export again reuses every stage whose build key and file hashes still match, from the partial
folder or from the previous export.
"""

from __future__ import annotations

import hashlib
import json
import logging
import shutil
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path
from types import SimpleNamespace

from fleetgui import __version__
from fleetgui.errors import FleetguiError
from fleetgui.export.architectures import adapter_for
from fleetgui.export.compression import compress_weights, save_compressed
from fleetgui.export.manifest import (
    MANIFEST_NAME,
    TOKENIZER_DIR,
    FileEntry,
    Manifest,
    ManifestError,
    ManifestStage,
    check_files,
    read_manifest,
)
from fleetgui.export.model_source import ModelSource, open_model_source
from fleetgui.export.monolithic import export_monolithic
from fleetgui.export.quality import ExportQuality
from fleetgui.export.stage_io import stage_io_names
from fleetgui.export.stage_reuse import (
    DONE_SUFFIX,
    done_marker,
    previous_stages,
    reusable_stage,
    up_to_date,
)
from fleetgui.export.tokenizer_export import export_tokenizer
from fleetgui.fsutil import atomic_write_text, link_or_copy, replace_dir
from fleetgui.shard import Shard, even_split, parse_layer_ranges

log = logging.getLogger(__name__)

EXPORTER_VERSION = 1  # bump when a change makes stages exported before incompatible
_BYTES_PER_PARAM = {"fp32": 4.0, "fp16": 2.0, "int8": 1.05, "int4": 0.6}


class ExportError(FleetguiError):
    """The export cannot be made as asked; the message says why and what to change."""


@dataclass(frozen=True)
class ExportProgress:
    """One step of an export, for a progress bar or the app."""

    step: int  # steps done so far
    total: int  # steps in all
    message: str  # what is happening now, e.g. "stage 2/4: compressing to int4"


ProgressCallback = Callable[[ExportProgress], None]


@dataclass(frozen=True)
class ExportRequest:
    """What to export and how."""

    model_dir: Path
    out_dir: Path
    stages: int | None = None  # even split into this many stages (default 1 if layers unset)
    layers: str | None = None  # exact half-open ranges, e.g. "0:10,10:22,22:32"
    weights: str = "int4"
    monolithic: bool = False
    beam_idx_gather: bool = True  # False only to measure what the Gather buys
    max_chunk_layers: int | None = None  # convert at most this many layers at once (None: auto)


def plan_shards(source: ModelSource, request: ExportRequest) -> list[Shard]:
    """The stages the request asks for, validated against the model."""
    if request.stages is not None and request.stages < 1:  # `or 1` below read 0 as unsplit
        raise ExportError(f"--stages must be at least 1, not {request.stages}")
    if request.monolithic:
        if request.layers or (request.stages or 1) != 1:
            raise ExportError("--monolithic writes one unsplit model: drop --stages/--layers")
        return [Shard(source.model_id, 0, source.n_layers, source.n_layers)]
    try:
        if request.layers:
            return parse_layer_ranges(source.model_id, source.n_layers, request.layers)
        return even_split(source.model_id, source.n_layers, request.stages or 1)
    except ValueError as exc:
        raise ExportError(str(exc)) from exc


# Converting a chunk of layers holds about this many times its fp32 weights in memory (torch
# weights, the converted graph, NNCF's working copies): measured on a 1B Llama.
_CONVERT_MEMORY_FACTOR = 2.5
_MEMORY_BUDGET = 0.5  # use at most this fraction of the available memory for one chunk


def chunk_layers(source: ModelSource, request: ExportRequest) -> int:
    """How many layers to trace and convert at once, so export fits in this PC's memory."""
    if request.max_chunk_layers is not None:
        if request.max_chunk_layers < 1:
            raise ExportError("--max-chunk-layers must be at least 1")
        return request.max_chunk_layers
    import psutil

    per_layer = max(source.layer_parameters(i) for i in range(source.n_layers)) * 4
    fixed = (source.hidden_size * source.vocab_size) * 4 * 2  # embedding and lm_head, fp32
    budget = psutil.virtual_memory().available * _MEMORY_BUDGET / _CONVERT_MEMORY_FACTOR
    return max(1, int((budget - fixed) // max(per_layer, 1)))


def split_into_chunks(shard: Shard, layers: int) -> list[Shard]:
    """``shard`` as consecutive chunks of at most ``layers`` layers (each a valid shard: a chunk
    inside a stage takes and returns hidden states)."""
    return [
        Shard(shard.model_id, start, min(start + layers, shard.end_layer), shard.n_layers)
        for start in range(shard.start_layer, shard.end_layer, layers)
    ]


def stage_key(source: ModelSource, shard: Shard, request: ExportRequest) -> str:
    """Hash of everything a stage's files depend on; equal keys mean reusable files."""
    payload = json.dumps(
        [
            EXPORTER_VERSION,
            source.identity_hash,
            shard.start_layer,
            shard.end_layer,
            request.weights,
            request.beam_idx_gather,
            request.monolithic,
            request.max_chunk_layers,
        ]
    )
    return hashlib.sha256(payload.encode()).hexdigest()


def _stage_file_name(shard: Shard) -> str:
    """Named by layer range, so a re-split can reuse a stage whose range did not change."""
    return f"stage_{shard.start_layer}-{shard.end_layer}.xml"


def _check_disk_space(source: ModelSource, request: ExportRequest, reusable: int) -> None:
    needed = int(source.n_parameters * _BYTES_PER_PARAM[request.weights] * 1.1) - reusable
    parent = request.out_dir.resolve().parent
    parent.mkdir(parents=True, exist_ok=True)
    free = shutil.disk_usage(parent).free
    if needed > free:
        raise ExportError(
            f"not enough disk space in {parent}: the {request.weights} export needs about "
            f"{needed / 1e9:.1f} GB and {free / 1e9:.1f} GB are free; free some space, choose "
            "another --out, or a smaller --weights format (int4 is smallest)"
        )


def _report_up_to_date(out: Path, progress: ProgressCallback | None) -> None:
    log.info("export: %s is up to date", out)
    if progress is not None:
        progress(ExportProgress(1, 1, f"{out}: up to date, every stage reused"))


def _checked_out_dir(out: Path) -> Path:
    if out.exists() and not out.is_dir():
        raise ExportError(f"--out {out} is a file; give a folder for the export")
    if out.exists() and not (out / MANIFEST_NAME).is_file() and any(out.iterdir()):
        raise ExportError(
            f"{out} exists and is not a fleetgui export; choose another --out or empty it"
        )
    return out


def _build_stage(
    source: ModelSource,
    shard: Shard,
    *,
    index: int,
    key: str,
    request: ExportRequest,
    partial: Path,
    report: Callable[[str], None],
) -> ManifestStage:
    from fleetgui.export.stage_export import convert_stage

    label = f"stage {index + 1} ({shard})"
    chunks = split_into_chunks(shard, chunk_layers(source, request))
    parts: list[Path] = []
    for number, chunk in enumerate(chunks):
        part = f" part {number + 1}/{len(chunks)}" if len(chunks) > 1 else ""
        report(f"{label}{part}: tracing and converting")
        model = convert_stage(source.path, chunk, beam_idx_gather=request.beam_idx_gather)
        if request.weights in ("int8", "int4"):
            report(f"{label}{part}: compressing weights to {request.weights}")
            model = compress_weights(model, request.weights)
        xml = partial / _stage_file_name(chunk)
        for stale in (xml, xml.with_suffix(".bin")):  # never write through a hard link into
            stale.unlink(missing_ok=True)  # the previous export's files
        save_compressed(model, str(xml), request.weights)
        del model
        parts.append(xml)
    io = stage_io_names(shard, beam_idx_gather=request.beam_idx_gather)
    entry = ManifestStage(
        index=index,
        start_layer=shard.start_layer,
        end_layer=shard.end_layer,
        files=tuple(
            FileEntry.of(partial, path) for xml in parts for path in (xml, xml.with_suffix(".bin"))
        ),
        inputs=io.inputs,
        outputs=io.outputs,
        kv_states=io.states,
        key=key,
        parts=tuple(xml.name for xml in parts) if len(parts) > 1 else (),
    )
    atomic_write_text(done_marker(partial, key), json.dumps(entry.to_dict()))
    return entry


def _bring_previous_tokenizer(out: Path, partial: Path) -> None:
    """A monolithic model reused from the previous export comes without the tokenizer files
    optimum wrote beside it: take those of the previous export too."""
    if (partial / "openvino_tokenizer.xml").is_file() or not (out / MANIFEST_NAME).is_file():
        return
    try:
        previous = read_manifest(out)
    except ManifestError:
        return
    for entry in previous.tokenizer_files:
        if not check_files(out, (entry,)):
            link_or_copy(out / entry.path, partial / entry.path)


def _drop_unlisted_files(folder: Path, manifest: Manifest) -> None:
    """Remove build markers and files of earlier runs that the manifest does not list."""
    listed = {f.path for f in manifest.tokenizer_files}
    listed |= {f.path for stage in manifest.stages for f in stage.files}
    listed.add(MANIFEST_NAME)
    for path in sorted(folder.rglob("*"), reverse=True):
        if path.is_file() and path.relative_to(folder).as_posix() not in listed:
            path.unlink()
        elif path.is_dir() and not any(path.iterdir()):
            path.rmdir()


def _verified(
    manifest: Manifest, partial: Path, verify: Callable[[Path], ExportQuality | None]
) -> Manifest:
    """Run ``verify`` on the written ``partial`` folder; the quality it returns goes into the
    manifest there (before the folder is published, so a published export carries it)."""
    quality = verify(partial)
    if quality is None:
        return manifest
    manifest = replace(manifest, quality=quality)
    manifest.write(partial)
    return manifest


def export_model(
    request: ExportRequest,
    *,
    progress: ProgressCallback | None = None,
    verify: Callable[[Path], ExportQuality | None] | None = None,
) -> Manifest:
    """Export ``request.model_dir`` to ``request.out_dir``; returns the written manifest.

    ``verify`` is called on the finished folder before it is moved into place; the quality it
    returns goes into the manifest. If it raises, the previous contents of ``out_dir`` stay as
    they were and the stages already built are kept for the next run.
    """
    out = _checked_out_dir(Path(request.out_dir))
    source = open_model_source(request.model_dir)  # also a .gguf file or a hub id
    adapter_for(SimpleNamespace(**source.config))  # unsupported architecture: fail before work
    shards = plan_shards(source, request)
    previous = previous_stages(out)
    keys = [stage_key(source, shard, request) for shard in shards]
    current = up_to_date(out, keys, source, verify is not None)
    if current is not None:
        _report_up_to_date(out, progress)
        return current
    reusable = sum(sum(f.size for f in previous[k].files) for k in keys if k in previous)
    _check_disk_space(source, request, reusable)
    partial = out.with_name(f".{out.name}.partial")
    partial.mkdir(parents=True, exist_ok=True)

    total = len(shards) + 2 + (verify is not None)
    done = 0

    def report(message: str) -> None:
        log.info("export: %s", message)
        if progress is not None:
            progress(ExportProgress(done, total, message))

    entries: list[ManifestStage] = []
    for index, (shard, key) in enumerate(zip(shards, keys, strict=True)):
        entry = reusable_stage(key, index, partial, previous, out)
        if entry is not None:
            report(f"stage {index + 1} ({shard}): unchanged, reused")
        elif request.monolithic:
            report("monolithic model: exporting with optimum-intel")
            entry = export_monolithic(source, partial, request.weights, key)
            atomic_write_text(done_marker(partial, key), json.dumps(entry.to_dict()))
        else:
            entry = _build_stage(
                source,
                shard,
                index=index,
                key=key,
                request=request,
                partial=partial,
                report=report,
            )
        entries.append(entry)
        done += 1

    report("tokenizer: copying and converting to OpenVINO")
    if request.monolithic:  # optimum wrote them next to the model, where openvino_genai looks
        _bring_previous_tokenizer(out, partial)
        model_files = {f.path for f in entries[0].files}
        tokenizer_files = [
            p
            for p in partial.iterdir()
            if p.is_file()
            and p.name not in model_files
            and p.name != MANIFEST_NAME
            and not p.name.endswith(DONE_SUFFIX)
        ]
    else:
        tokenizer_files = export_tokenizer(source, partial / TOKENIZER_DIR)
    done += 1

    manifest = Manifest(
        model_name=source.name,
        model_hash=source.identity_hash,
        architecture=source.model_type,
        n_layers=source.n_layers,
        hidden_size=source.hidden_size,
        vocab_size=source.vocab_size,
        weight_format=request.weights,
        stages=tuple(entries),
        tokenizer_files=tuple(FileEntry.of(partial, f) for f in sorted(set(tokenizer_files))),
        layout="monolithic" if request.monolithic else "stages",
        config=source.config,
        fleetgui_version=__version__,
        tokenizer_hash=source.tokenizer_hash,
    )
    manifest.write(partial)
    if verify is not None:
        report("verifying against the source model")
        manifest = _verified(manifest, partial, verify)
        done += 1
    _drop_unlisted_files(partial, manifest)
    replace_dir(partial, out)
    done += 1
    report(f"done: {out}")
    return manifest
