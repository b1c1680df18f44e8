"""Tokenization on the coordinator with the export's OpenVINO tokenizer and detokenizer.

No transformers on the serving path: the export ships ``openvino_tokenizer.xml`` and
``openvino_detokenizer.xml`` (converted from the HF tokenizer by openvino-tokenizers).
"""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import openvino as ov
import openvino_tokenizers  # noqa: F401  (adds the tokenizer operations to every ov.Core)

from fleetgui.errors import FleetguiError

log = logging.getLogger(__name__)

REPLACEMENT = "\ufffd"


def tokenizer_dir_of(export_dir: Path) -> Path:
    """Where an export keeps its tokenizer (``tokenizer/``, or beside a monolithic model)."""
    sub = Path(export_dir) / "tokenizer"
    return sub if sub.is_dir() else Path(export_dir)


class Tokenizer:
    """Encode text to ids and decode ids to text with an export's OpenVINO tokenizer pair."""

    def __init__(self, folder: Path, core: ov.Core | None = None) -> None:
        core = core or ov.Core()
        folder = Path(folder)
        for name in ("openvino_tokenizer.xml", "openvino_detokenizer.xml"):
            if not (folder / name).is_file():
                raise FleetguiError(f"{folder} has no {name}: re-export the model")
        self.folder = folder
        self._encoder = core.compile_model(str(folder / "openvino_tokenizer.xml"), "CPU")
        self._decoder = core.compile_model(str(folder / "openvino_detokenizer.xml"), "CPU")
        self.eos_token_ids = _eos_ids(folder)

    def encode(self, text: str) -> list[int]:
        result = self._encoder([text])
        return [int(i) for i in result["input_ids"][0]]

    def decode(self, ids: list[int]) -> str:
        if not ids:
            return ""
        out = self._decoder(np.array([ids], dtype=np.int64))
        return str(out[self._decoder.output(0)][0])

    def fingerprint(self) -> str:
        """Identity of the vocabulary, to check a draft model shares the target's tokenizer."""
        hf = self.folder / "tokenizer.json"
        if hf.is_file():
            data = json.loads(hf.read_text(encoding="utf-8"))
            vocab = data.get("model", {}).get("vocab", {})
            return json.dumps([sorted(vocab.items()) if isinstance(vocab, dict) else vocab])
        return str(self.encode("The quick brown fox, 12345 def f(): return {}"))


def _eos_ids(folder: Path) -> frozenset[int]:
    ids: set[int] = set()
    for name in ("generation_config.json", "config.json", "tokenizer_config.json"):
        path = folder / name
        if not path.is_file():
            path = folder.parent / name
        if not path.is_file():
            continue
        value = json.loads(path.read_text(encoding="utf-8")).get("eos_token_id")
        if isinstance(value, int):
            ids.add(value)
        elif isinstance(value, list):
            ids.update(int(v) for v in value)
    return frozenset(ids)


@dataclass
class IncrementalText:
    """Turns a growing list of token ids into text deltas, honouring stop strings.

    Text that ends in an incomplete UTF-8 sequence (shown as U+FFFD by byte-level BPE) is held
    back until the next token completes it.
    """

    tokenizer: Tokenizer
    stop_strings: tuple[str, ...] = ()
    text: str = ""  # emitted so far
    stopped: bool = False

    def update(self, ids: list[int]) -> str:
        """The new text after the tokens ``ids`` (all generated so far); '' if none yet."""
        full = self.tokenizer.decode(ids)
        for stop in self.stop_strings:
            at = full.find(stop)
            if at >= 0:
                full = full[:at]
                self.stopped = True
        if not self.stopped and full.endswith(REPLACEMENT):
            full = full.rstrip(REPLACEMENT)
        if not full.startswith(self.text):
            return ""  # a decoding artefact shrank the text; wait for more tokens
        delta = full[len(self.text) :]
        self.text = full
        return delta
