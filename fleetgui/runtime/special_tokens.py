"""A tokenizer folder's special tokens, read from its JSON files (no transformers).

``tokenizer_config.json`` and ``special_tokens_map.json`` name tokens as strings or as
``{"content": ...}`` dicts (an ``AddedToken`` saved by transformers); ``tokenizer.json`` maps
them to ids. The end-of-turn ids are every EOS a model's files declare: a chat model's
``generation_config.json`` often lists its end-of-turn token (``<|im_end|>``, ``<|eot_id|>``)
beside the plain EOS, and some exports only name the EOS by its text.
"""

from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import Any

log = logging.getLogger(__name__)

#: The named special tokens transformers passes to a chat template (``special_tokens_map``).
NAMED_TOKENS = (
    "bos_token",
    "eos_token",
    "unk_token",
    "sep_token",
    "pad_token",
    "cls_token",
    "mask_token",
)
#: Where EOS ids are declared, beside the tokenizer or one folder up (the export's root).
EOS_ID_FILES = ("generation_config.json", "config.json", "tokenizer_config.json")


def read_json(path: Path) -> dict[str, Any]:
    """``path`` as a JSON object; {} if it is missing or not a readable JSON object (a damaged
    optional file must not stop a model from loading; it is logged)."""
    if not path.is_file():
        return {}
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        log.warning("cannot read %s (%s); ignoring it", path, exc)
        return {}
    return data if isinstance(data, dict) else {}


def token_text(value: Any) -> str | None:
    """A special token as its text: a string, or the ``content`` of an AddedToken dict."""
    if isinstance(value, str):
        return value
    if isinstance(value, dict) and isinstance(value.get("content"), str):
        return str(value["content"])
    return None


def special_tokens(folder: Path) -> dict[str, str]:
    """The named special tokens of the tokenizer in ``folder`` (``bos_token``, ``eos_token``,
    ...), as transformers loads them: ``tokenizer_config.json``, where
    ``special_tokens_map.json`` overrides it unless the config lists its added tokens (what
    transformers 5 does), plus model-specific named tokens (``extra_special_tokens`` as a
    dict). Tokens that are null are left out, as transformers leaves them out of a template's
    variables."""
    config = read_json(Path(folder) / "tokenizer_config.json")
    merged = dict(config)
    if "added_tokens_decoder" not in config:
        merged.update(read_json(Path(folder) / "special_tokens_map.json"))
    names = list(NAMED_TOKENS)
    extra = merged.get("extra_special_tokens")
    if isinstance(extra, dict):
        merged.update(extra)
        names += [str(k) for k in extra]
    tokens: dict[str, str] = {}
    for name in names:
        text = token_text(merged.get(name))
        if text is not None:
            tokens[name] = text
    return tokens


def token_ids(folder: Path) -> dict[str, int]:
    """Token text -> id from ``folder/tokenizer.json``: the added tokens, then the model's
    vocabulary (a dict for BPE/WordPiece, a list of ``[piece, score]`` for Unigram)."""
    data = read_json(Path(folder) / "tokenizer.json")
    ids: dict[str, int] = {}
    vocab = data.get("model", {}).get("vocab") if isinstance(data.get("model"), dict) else None
    if isinstance(vocab, dict):
        ids.update({str(k): int(v) for k, v in vocab.items() if isinstance(v, int)})
    elif isinstance(vocab, list):
        ids.update({str(p[0]): i for i, p in enumerate(vocab) if isinstance(p, list) and p})
    for added in data.get("added_tokens", []) or []:
        if isinstance(added, dict) and isinstance(added.get("content"), str):
            ids[str(added["content"])] = int(added["id"])
    return ids


def _declared_ids(value: Any) -> set[int]:
    if isinstance(value, bool):
        return set()
    if isinstance(value, int):
        return {value}
    if isinstance(value, list):
        return {int(v) for v in value if isinstance(v, int) and not isinstance(v, bool)}
    return set()


def end_of_turn_ids(folder: Path) -> frozenset[int]:
    """Every id that ends a reply: ``eos_token_id`` (an int or a list) in
    ``generation_config.json``, ``config.json`` and ``tokenizer_config.json`` (in ``folder`` or
    the export folder above it), the source config an export's ``manifest.json`` carries, and
    the id of the tokenizer's ``eos_token`` text."""
    folder = Path(folder)
    ids: set[int] = set()
    for name in EOS_ID_FILES:
        path = folder / name
        if not path.is_file():
            path = folder.parent / name
        ids |= _declared_ids(read_json(path).get("eos_token_id"))
    for manifest in (folder / "manifest.json", folder.parent / "manifest.json"):
        config = read_json(manifest).get("config")
        if isinstance(config, dict):
            ids |= _declared_ids(config.get("eos_token_id"))
            break
    eos = special_tokens(folder).get("eos_token")
    if eos is not None:
        eos_id = token_ids(folder).get(eos)
        if eos_id is not None:
            ids.add(eos_id)
    return frozenset(ids)
