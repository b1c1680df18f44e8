"""The export's ``tokenizer/`` folder: HF tokenizer files plus OpenVINO tokenizer/detokenizer."""

from __future__ import annotations

import logging
import shutil
from pathlib import Path
from typing import Any

from fleetgui.errors import FleetguiError
from fleetgui.export.model_source import ModelSource

log = logging.getLogger(__name__)

OV_TOKENIZER = "openvino_tokenizer.xml"
OV_DETOKENIZER = "openvino_detokenizer.xml"
#: Texts the OpenVINO tokenizer must encode to the HF tokenizer's ids (chat markup included:
#: rendered templates put special tokens in the text).
ID_CHECK_TEXTS = (
    "Hello, world! The capital of France is Paris.",
    "def add(a, b):\n    return a + b  # 12345 67.89\n",
    "  leading spaces,\ttabs\n\nand blank lines  ",
    "naïve café, Grüße, 東京, emoji 🎉",
)


class TokenizerMismatchError(FleetguiError):
    """The OpenVINO tokenizer written into the export encodes differently from the HF one."""


def check_same_ids(hf_tokenizer: Any, ov_tokenizer: Any, source: Path) -> None:
    """The converted OpenVINO tokenizer must give the HF tokenizer's ids (what ``verify`` and the
    reference use) on sample texts and on each special token in context; else the export fails."""
    import openvino as ov

    specials = [str(t) for t in getattr(hf_tokenizer, "all_special_tokens", [])][:8]
    texts = list(ID_CHECK_TEXTS) + [f"{t}user\nHi{t}\n" for t in specials]
    compiled = ov.Core().compile_model(ov_tokenizer, "CPU")
    for text in texts:
        want = [int(i) for i in hf_tokenizer(text)["input_ids"]]
        got = [int(i) for i in compiled([text])["input_ids"][0]]
        if got != want:
            raise TokenizerMismatchError(
                f"the OpenVINO tokenizer converted from {source} encodes {text!r} as {got[:12]}, "
                f"the HF tokenizer as {want[:12]}: the export would be prompted differently from "
                "its reference. Check the model's tokenizer files (tokenizer.json, "
                "tokenizer_config.json)"
            )


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
    check_same_ids(hf_tokenizer, tokenizer, source.path)
    ov.save_model(tokenizer, out_dir / OV_TOKENIZER)
    ov.save_model(detokenizer, out_dir / OV_DETOKENIZER)
    for name in (OV_TOKENIZER, OV_DETOKENIZER):
        written += [out_dir / name, (out_dir / name).with_suffix(".bin")]
    log.debug("tokenizer exported to %s", out_dir)  # a build folder: the user sees no such path
    return [p for p in written if p.is_file()]
