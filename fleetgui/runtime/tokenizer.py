"""Tokenization on the coordinator with the export's OpenVINO tokenizer and detokenizer.

No transformers on the serving path: the export ships ``openvino_tokenizer.xml`` and
``openvino_detokenizer.xml`` (converted from the HF tokenizer by openvino-tokenizers). Decoding,
which runs every step, uses the HF ``tokenizers`` library instead when it is installed and
decodes a check sample exactly as the OpenVINO detokenizer does: a few microseconds a call
instead of a few hundred. Encoding does the same when HF encodes check texts to the same ids,
so that the app can measure a prompt on its GUI thread without running an OpenVINO model there.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import openvino as ov
import openvino_tokenizers  # noqa: F401  (adds the tokenizer operations to every ov.Core)

from fleetgui.errors import FleetguiError
from fleetgui.runtime.constraint import GrammarEngine
from fleetgui.runtime.special_tokens import end_of_turn_ids

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
        self._decode_request = self._decoder.create_infer_request()
        self.eos_token_ids = _eos_ids(folder)
        self._fast = _fast_decoder(folder, self._ov_decode)
        self._fast_encode = _fast_encoder(self._fast, self._ov_encode)
        self.grammar = GrammarEngine(folder, self.eos_token_ids)  # for constrained answers

    def encode(self, text: str) -> list[int]:
        if self._fast_encode is not None:
            return self._fast_encode(text)
        return self._ov_encode(text)

    def _ov_encode(self, text: str) -> list[int]:
        result = self._encoder([text])
        return [int(i) for i in result["input_ids"][0]]

    def decode(self, ids: list[int]) -> str:
        if not ids:
            return ""
        if self._fast is not None:
            return str(self._fast.decode(ids))
        return self._ov_decode(ids)

    def _ov_decode(self, ids: list[int]) -> str:
        self._decode_request.infer({0: np.array([ids], dtype=np.int64)})
        return str(self._decode_request.get_output_tensor(0).str_data[0])

    def fingerprint(self) -> str:
        """Identity of the vocabulary, to check a draft model shares the target's tokenizer."""
        hf = self.folder / "tokenizer.json"
        if hf.is_file():
            data = json.loads(hf.read_text(encoding="utf-8"))
            vocab = data.get("model", {}).get("vocab", {})
            return json.dumps([sorted(vocab.items()) if isinstance(vocab, dict) else vocab])
        return str(self.encode("The quick brown fox, 12345 def f(): return {}"))


FAST_CHECK_TEXT = (
    "def f(x):\n    return {'a': [1, 2.5e-3]}  # naïve café, Grüße, 東京, emoji 🎉\n\n"
    "The  quick brown fox\tjumps.  <s></s> [INST] ÀÉÎÕÜ ß ø 123456789"
)


def _fast_decoder(folder: Path, reference: Callable[[list[int]], str]) -> Any:
    """The HF ``tokenizers`` decoder (microseconds a call, where the OpenVINO detokenizer takes
    a few hundred) when it is installed and decodes exactly like the export's detokenizer on a
    sample of text and of single tokens; else None (the OpenVINO detokenizer is used)."""
    path = folder / "tokenizer.json"
    if not path.is_file():
        return None
    try:
        from tokenizers import Tokenizer as HFTokenizer
    except ImportError:
        return None
    try:
        fast = HFTokenizer.from_file(str(path))
        ids = fast.encode(FAST_CHECK_TEXT).ids
        vocab = fast.get_vocab_size()
        samples = [ids, ids[:7], ids[3:9], *([i] for i in range(min(vocab, 300)))]
        samples += [[i] for i in range(max(0, vocab - 50), vocab)]
        for sample in samples:
            # The OpenVINO string tensor drops NUL bytes; HF keeps them (both are fine).
            if fast.decode(sample).replace("\x00", "") != reference(sample):
                log.info("HF tokenizers decodes %s differently; using the OpenVINO one", sample)
                return None
    except Exception as exc:  # a tokenizer.json this tokenizers version cannot read
        log.info("HF tokenizers cannot load %s (%s); using the OpenVINO detokenizer", path, exc)
        return None
    return fast


ENCODE_CHECK_TEXTS = (
    FAST_CHECK_TEXT,
    "",
    " leading space",
    "Hello, world!",
    "def add(a, b):\n    return a + b\n",
    "x" * 300,
)


def _fast_encoder(
    fast: Any, reference: Callable[[str], list[int]]
) -> Callable[[str], list[int]] | None:
    """HF ``tokenizers`` encoding (special tokens as the export adds them) when it gives the
    export's OpenVINO tokenizer's ids on every check text; else None."""
    if fast is None:
        return None
    expected = [reference(text) for text in ENCODE_CHECK_TEXTS]
    for add_special in (True, False):
        try:
            got = [fast.encode(t, add_special_tokens=add_special).ids for t in ENCODE_CHECK_TEXTS]
        except Exception as exc:  # any failure: keep the OpenVINO tokenizer
            log.info("HF tokenizers cannot encode like the export (%s)", exc)
            return None
        if got == expected:

            def encode(text: str, special: bool = add_special) -> list[int]:
                return list(fast.encode(text, add_special_tokens=special).ids)

            return encode
    log.info("HF tokenizers encodes differently; using the OpenVINO tokenizer")
    return None


def _eos_ids(folder: Path) -> frozenset[int]:
    """The ids that end a reply: every EOS the model's files declare, end-of-turn tokens such
    as ``<|im_end|>`` or ``<|eot_id|>`` included (see ``special_tokens.end_of_turn_ids``)."""
    return end_of_turn_ids(folder)


@dataclass
class IncrementalText:
    """Turns a growing list of token ids into text deltas, honouring stop strings.

    Each update decodes only the last few tokens: the text of ``ids[prefix:]`` minus that of
    ``ids[prefix:read]``, where ``read`` is where the emitted text ends and ``prefix`` a few
    tokens before it (so that merges and leading spaces come out as in a full decode). Text
    that ends in an incomplete UTF-8 sequence (U+FFFD from byte-level BPE) is held back until
    the next token completes it.
    """

    tokenizer: Tokenizer
    stop_strings: tuple[str, ...] = ()
    text: str = ""  # emitted so far
    stopped: bool = False
    _prefix: int = 0
    _read: int = 0
    _held: str = ""  # decoded past the stop-string horizon, not yet emitted

    def update(self, ids: list[int]) -> str:
        """The new text after the tokens ``ids`` (all generated so far); '' if none yet."""
        if self.stopped or len(ids) <= self._read:
            return ""
        prefix_text = self.tokenizer.decode(ids[self._prefix : self._read])
        new_text = self.tokenizer.decode(ids[self._prefix :])
        if new_text.endswith(REPLACEMENT) or not new_text.startswith(prefix_text):
            return ""  # an incomplete character, or a merge that rewrote the tail: wait
        self._prefix, self._read = max(self._read - 4, 0), len(ids)
        pending = self._held + new_text[len(prefix_text) :]
        delta, self._held = self._cut_at_stop(pending)
        self.text += delta
        return delta

    def _cut_at_stop(self, pending: str) -> tuple[str, str]:
        """Split ``pending`` into what can be emitted and what must wait for more text (a
        possible start of a stop string); stop at a complete stop string."""
        if not self.stop_strings:
            return pending, ""
        window = self.text[-max(len(s) for s in self.stop_strings) :] + pending
        offset = len(window) - len(pending)
        found = [at for at in (window.find(stop) for stop in self.stop_strings) if at >= 0]
        if found:
            self.stopped = True
            return window[offset : max(min(found), offset)], ""
        hold = 0  # the longest tail of the window that could start a stop string
        for stop in self.stop_strings:
            for size in range(min(len(stop) - 1, len(pending)), hold, -1):
                if window.endswith(stop[:size]):
                    hold = size
                    break
        return pending[: len(pending) - hold], pending[len(pending) - hold :]

    def flush(self, ids: list[int] | None = None) -> str:
        """The rest of the text once ``ids`` (all generated) are all there is: what an
        incomplete character held back, decoded as it is, and what could have started a stop
        string. So the text is the tokens' whole decoded text (up to a stop string) however the
        tokens came, one at a time or a speculative round's several at once."""
        if self.stopped:
            self._held = ""
            return ""
        pending, self._held = self._held, ""
        if ids is not None and len(ids) > self._read:
            prefix_text = self.tokenizer.decode(ids[self._prefix : self._read])
            new_text = self.tokenizer.decode(ids[self._prefix :])
            if new_text.startswith(prefix_text):
                pending += new_text[len(prefix_text) :]
            else:  # a merge rewrote the tail: the unread tokens' own text
                pending += self.tokenizer.decode(ids[self._read :])
            self._read = len(ids)
        delta, held = self._cut_at_stop(pending)
        if not self.stopped:
            delta += held  # nothing follows that could complete a stop string
        self.text += delta
        return delta
