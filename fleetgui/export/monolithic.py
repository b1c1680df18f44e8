"""``--monolithic``: the unsplit model as optimum-intel exports it, for openvino_genai.

This is the baseline every benchmark compares against and the second reference of
``fleetgui verify``, so it is made by optimum-intel's own exporter rather than by fleetgui's
stage tracer: an independent graph, the one users would otherwise run, and one that
``openvino_genai.LLMPipeline(DIR, "CPU")`` loads with every backend (its paged-attention
transformation expects optimum's graph). Weights are then compressed with the same NNCF settings
as the stages, so a stage chain and the monolithic model hold the same quantized weights.
Unlike stage export this loads the whole model into memory.
"""

from __future__ import annotations

import logging
import shutil
import tempfile
from pathlib import Path

from fleetgui.errors import FleetguiError
from fleetgui.export.compression import compress_weights, save_compressed
from fleetgui.export.manifest import FileEntry, ManifestStage
from fleetgui.export.model_source import ModelSource
from fleetgui.export.stage_io import quiet_openvino_telemetry

log = logging.getLogger(__name__)

MONOLITHIC_MODEL = "openvino_model.xml"  # the name openvino_genai.LLMPipeline looks for


def export_monolithic(source: ModelSource, out_dir: Path, weights: str, key: str) -> ManifestStage:
    """Write the unsplit model, its tokenizers and config into ``out_dir``; return its entry.

    Everything optimum writes besides the model (tokenizer files, OpenVINO tokenizer and
    detokenizer, config.json, generation_config.json) lands in ``out_dir`` too.
    """
    import openvino as ov
    from optimum.exporters.openvino import main_export
    from optimum.intel import OVConfig

    with tempfile.TemporaryDirectory(prefix=".optimum-", dir=out_dir) as tmp:
        try:
            with quiet_openvino_telemetry():
                main_export(
                    str(source.path),
                    tmp,
                    task="text-generation-with-past",
                    local_files_only=True,
                    ov_config=OVConfig(dtype="fp32"),
                    convert_tokenizer=True,
                )
        except ValueError as exc:  # e.g. an architecture capped below this transformers
            raise FleetguiError(
                f"optimum-intel cannot export this {source.model_type} model as one piece: "
                f"{exc}. 'fleetgui export --stages 1' writes an unsplit fleetgui export instead"
            ) from exc
        model = ov.Core().read_model(Path(tmp) / MONOLITHIC_MODEL)
        model = compress_weights(model, weights)
        xml = out_dir / MONOLITHIC_MODEL
        save_compressed(model, str(xml), weights)
        for file in Path(tmp).iterdir():
            if file.is_file() and file.stem != Path(MONOLITHIC_MODEL).stem:
                shutil.move(str(file), out_dir / file.name)
    states = tuple(sorted(v.info.variable_id for v in model.get_variables()))
    log.info("monolithic model written to %s", xml)
    return ManifestStage(
        index=0,
        start_layer=0,
        end_layer=source.n_layers,
        files=(FileEntry.of(out_dir, xml), FileEntry.of(out_dir, xml.with_suffix(".bin"))),
        inputs=tuple(port.get_any_name() for port in model.inputs),
        outputs=tuple(port.get_any_name() for port in model.outputs),
        kv_states=states,
        key=key,
    )
