"""The export's ``tokenizer/`` folder: HF tokenizer files plus OpenVINO tokenizer/detokenizer."""

from __future__ import annotations

import logging
import shutil
from pathlib import Path

from fleetgui.errors import FleetguiError
from fleetgui.export.model_source import ModelSource

log = logging.getLogger(__name__)

OV_TOKENIZER = "openvino_tokenizer.xml"
OV_DETOKENIZER = "openvino_detokenizer.xml"


def export_tokenizer(source: ModelSource, out_dir: Path) -> list[Path]:
    """Copy the HF tokenizer files to ``out_dir`` and convert them to OpenVINO models there.

    Returns the files written. The OpenVINO pair is what ``openvino_genai`` loads; the HF files
    are what the coordinator's tokenizer and a draft-compatibility check read.
    """
    files = source.tokenizer_files()
    if not any(f.name in ("tokenizer.json", "tokenizer.model") for f in files):
        raise FleetguiError(
            f"{source.path} has no tokenizer (tokenizer.json or tokenizer.model): copy the "
            "model's tokenizer files into the folder"
        )
    out_dir.mkdir(parents=True, exist_ok=True)
    written: list[Path] = []
    for file in files:
        shutil.copy2(file, out_dir / file.name)
        written.append(out_dir / file.name)
    for extra in ("generation_config.json",):
        if (source.path / extra).is_file():
            shutil.copy2(source.path / extra, out_dir / extra)
            written.append(out_dir / extra)

    import openvino as ov
    from openvino_tokenizers import convert_tokenizer
    from transformers import AutoTokenizer

    hf_tokenizer = AutoTokenizer.from_pretrained(source.path)
    tokenizer, detokenizer = convert_tokenizer(hf_tokenizer, with_detokenizer=True)
    ov.save_model(tokenizer, out_dir / OV_TOKENIZER)
    ov.save_model(detokenizer, out_dir / OV_DETOKENIZER)
    for name in (OV_TOKENIZER, OV_DETOKENIZER):
        written += [out_dir / name, (out_dir / name).with_suffix(".bin")]
    log.info("tokenizer exported to %s", out_dir)
    return [p for p in written if p.is_file()]
