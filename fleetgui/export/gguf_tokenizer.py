"""A GGUF file's tokenizer rebuilt as a HuggingFace ``tokenizer.json``, from its own metadata.

transformers' GGUF tokenizer conversion is wrong for the files people have (SmolLM2's reloads as
a CodeLlama tokenizer that wraps every space in ``<|endoftext|>``), so the tokenizer is built here
from ``tokenizer.ggml.*``: the vocabulary in id order, the BPE merges, the token types (control and
user-defined tokens become added tokens), the pre-tokenizer ``tokenizer.ggml.pre`` names (the same
split expressions llama.cpp applies) and the bos/eos ids. :func:`check_tokenizer` then proves it
against the file: every token of the vocabulary must decode to its own text, control tokens must
encode to their ids, and sample texts must round-trip.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from fleetgui.errors import FleetguiError

if TYPE_CHECKING:
    from tokenizers import Tokenizer
    from tokenizers.processors import PostProcessor

log = logging.getLogger(__name__)

# GGUF token types (llama.cpp's llama_token_type).
NORMAL, UNKNOWN, CONTROL, USER_DEFINED, UNUSED, BYTE = 1, 2, 3, 4, 5, 6

_GPT2_SPLIT = r"'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+"
_LLAMA3_SPLIT = (
    r"(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\r\n\p{L}\p{N}]?\p{L}+"
    r"|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"
)
_QWEN2_SPLIT = (
    r"(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\r\n\p{L}\p{N}]?\p{L}+"
    r"|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"
)
#: ``tokenizer.ggml.pre`` -> the split expressions applied in order before byte-level BPE (as in
#: llama.cpp's llama-vocab.cpp).
PRE_TOKENIZERS: dict[str, tuple[str, ...]] = {
    "default": (_GPT2_SPLIT,),
    "gpt2": (_GPT2_SPLIT,),
    "gpt-2": (_GPT2_SPLIT,),
    "mpt": (_GPT2_SPLIT,),
    "olmo": (_GPT2_SPLIT,),
    "smollm": (r"\p{N}", _GPT2_SPLIT),
    "starcoder": (r"\p{N}", _GPT2_SPLIT),
    "refact": (r"\p{N}", _GPT2_SPLIT),
    "llama3": (_LLAMA3_SPLIT,),
    "llama-v3": (_LLAMA3_SPLIT,),
    "llama-bpe": (_LLAMA3_SPLIT,),
    "dbrx": (_LLAMA3_SPLIT,),
    "smaug-bpe": (_LLAMA3_SPLIT,),
    "qwen2": (_QWEN2_SPLIT,),
    "stablelm2": (_QWEN2_SPLIT,),
}

#: Texts every rebuilt tokenizer must encode and decode back unchanged.
ROUND_TRIP_TEXTS = (
    "Hello, world! The capital of France is Paris.",
    "def add(a, b):\n    return a + b  # 12345 67.89\n",
    "  leading spaces,\ttabs\n\nand blank lines  ",
    "naïve café, Grüße, 東京, emoji 🎉, ÀÉÎÕÜ ß ø",
    "<|im_start|>user\nWhat is 2+2?<|im_end|>",
)


class GGUFTokenizerError(FleetguiError):
    """The GGUF file's tokenizer cannot be rebuilt, or the rebuilt one does not match it."""


@dataclass(frozen=True)
class GGUFVocab:
    """The tokenizer fields of a GGUF file (``tokenizer.ggml.*``)."""

    model: str  # "gpt2" (byte-level BPE) or "llama" (SentencePiece), ...
    pre: str  # the pre-tokenizer's name
    tokens: tuple[str, ...]  # by id
    token_types: tuple[int, ...]  # by id (NORMAL, CONTROL, ...)
    merges: tuple[str, ...]  # "left right", by priority
    bos_id: int | None
    eos_id: int | None
    add_bos: bool
    chat_template: str | None
    scores: tuple[float, ...] = ()  # by id (SentencePiece vocabularies: the merge order)
    add_space_prefix: bool = False  # SentencePiece: a "▁" before the text (Llama 2, not Gemma)
    # the built-in format ``chat_template`` holds when the file has none (chat_formats.PLAIN: no
    # known family); "" when the template is the file's own
    chat_format: str = ""

    @classmethod
    def from_fields(cls, fields: dict[str, Any]) -> GGUFVocab:
        """From a GGUF file's metadata, as ``{key: value}``."""
        model = str(fields.get("tokenizer.ggml.model", ""))
        tokens = tuple(str(t) for t in fields.get("tokenizer.ggml.tokens", ()))
        if not tokens:
            raise GGUFTokenizerError("the GGUF file has no tokenizer (tokenizer.ggml.tokens)")
        types = tuple(int(t) for t in fields.get("tokenizer.ggml.token_type", ()))
        bos, eos = (
            fields.get("tokenizer.ggml.bos_token_id"),
            fields.get("tokenizer.ggml.eos_token_id"),
        )
        template = fields.get("tokenizer.chat_template")
        return cls(
            model=model,
            pre=str(fields.get("tokenizer.ggml.pre", "default")),
            tokens=tokens,
            token_types=types or (NORMAL,) * len(tokens),
            merges=tuple(str(m) for m in fields.get("tokenizer.ggml.merges", ())),
            bos_id=None if bos is None else int(bos),
            eos_id=None if eos is None else int(eos),
            add_bos=bool(fields.get("tokenizer.ggml.add_bos_token", model == "llama")),
            chat_template=None if template is None else str(template),
            scores=tuple(float(x) for x in fields.get("tokenizer.ggml.scores", ())),
            # llama.cpp's default: a space prefix for SentencePiece vocabularies only
            add_space_prefix=bool(fields.get("tokenizer.ggml.add_space_prefix", model == "llama")),
        )

    def token(self, token_id: int | None) -> str | None:
        if token_id is None or not 0 <= token_id < len(self.tokens):
            return None
        return self.tokens[token_id]

    def special_ids(self) -> list[int]:
        """Ids that are matched whole in text: control and user-defined tokens."""
        return [i for i, t in enumerate(self.token_types) if t in (CONTROL, USER_DEFINED)]


def check_rebuildable(model: str, pre: str, *, tokens: int, scores: int, merges: int) -> None:
    """Raise ``GGUFTokenizerError`` naming the tokenizer model or pre-tokenizer when fleetgui
    cannot rebuild a tokenizer of ``tokenizer.ggml.model`` ``model``, ``pre``-tokenizer ``pre``
    and that many tokens, scores and merges (cheap: nothing is built, so the model library
    asks it of every GGUF file it lists)."""
    if not tokens:
        raise GGUFTokenizerError("the GGUF file has no tokenizer (tokenizer.ggml.tokens)")
    if model == "llama":
        if scores != tokens:
            raise GGUFTokenizerError(
                "the GGUF file's SentencePiece tokenizer has no scores (tokenizer.ggml.scores)"
            )
        return
    if model != "gpt2":
        raise GGUFTokenizerError(
            f"the GGUF file's tokenizer model is {model!r}; fleetgui rebuilds byte-level "
            "BPE ('gpt2': Llama 3, Qwen 2/3, SmolLM, Phi-3.5 ...) and SentencePiece BPE "
            "('llama': Llama 2, Mistral, Gemma) tokenizers from GGUF metadata. Export the model "
            "from its HuggingFace folder or hub id instead"
        )
    if pre not in PRE_TOKENIZERS:
        raise GGUFTokenizerError(
            f"the GGUF file's pre-tokenizer {pre!r} is not supported; supported: "
            f"{', '.join(sorted(PRE_TOKENIZERS))}. Export the model from its HuggingFace folder "
            "or hub id instead"
        )
    if not merges:
        raise GGUFTokenizerError(
            "the GGUF file's BPE tokenizer has no merges (tokenizer.ggml.merges)"
        )


def build_tokenizer_json(vocab: GGUFVocab) -> str:
    """The ``tokenizer.json`` text of the GGUF file's tokenizer; raises ``GGUFTokenizerError``
    naming the tokenizer model or pre-tokenizer when it is one fleetgui cannot rebuild."""
    check_rebuildable(
        vocab.model,
        vocab.pre,
        tokens=len(vocab.tokens),
        scores=len(vocab.scores),
        merges=len(vocab.merges),
    )
    if vocab.model == "llama":
        return _sentencepiece_json(vocab)
    splits = PRE_TOKENIZERS[vocab.pre]
    from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers, processors

    bpe = models.BPE(
        vocab={token: i for i, token in enumerate(vocab.tokens)},
        merges=[(left, right) for left, _, right in (m.partition(" ") for m in vocab.merges)],
        fuse_unk=False,
        byte_fallback=False,
    )
    tokenizer = Tokenizer(bpe)
    tokenizer.pre_tokenizer = pre_tokenizers.Sequence(
        [pre_tokenizers.Split(Regex(expr), behavior="isolated") for expr in splits]
        + [pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)]
    )
    tokenizer.decoder = decoders.ByteLevel()
    _add_special_tokens(tokenizer, vocab)
    template = _bos_template(vocab)
    tokenizer.post_processor = (
        template if template is not None else processors.ByteLevel(trim_offsets=False)
    )
    return str(tokenizer.to_str())


def _add_special_tokens(tokenizer: Tokenizer, vocab: GGUFVocab) -> None:
    """The vocabulary's control and user-defined tokens, as added tokens matched whole."""
    from tokenizers import AddedToken

    tokenizer.add_special_tokens(
        [
            AddedToken(vocab.tokens[i], special=vocab.token_types[i] == CONTROL, normalized=False)
            for i in vocab.special_ids()
        ]
    )


def _bos_template(vocab: GGUFVocab) -> PostProcessor | None:
    """A post-processor that starts each sequence with BOS; None when the model adds none."""
    from tokenizers import processors

    bos = vocab.token(vocab.bos_id)
    if not vocab.add_bos or bos is None or vocab.bos_id is None:
        return None
    return processors.TemplateProcessing(
        single=f"{bos}:0 $A:0",
        pair=f"{bos}:0 $A:0 {bos}:1 $B:1",
        special_tokens=[(bos, vocab.bos_id)],
    )


SPACE = "\u2581"  # SentencePiece's visible space


def sentencepiece_merges(vocab: GGUFVocab) -> list[tuple[str, str]]:
    """BPE merges equivalent to a SentencePiece BPE vocabulary: every split of a normal piece
    into two normal pieces, the pieces with the higher score merged first (SentencePiece BPE
    merges the pair whose result scores highest)."""
    normal = {t: i for i, t in enumerate(vocab.tokens) if vocab.token_types[i] == NORMAL}
    found: list[tuple[float, int, int, str, str]] = []
    for piece, index in normal.items():
        for cut in range(1, len(piece)):
            left, right = piece[:cut], piece[cut:]
            if left in normal and right in normal:
                found.append((-vocab.scores[index], normal[left], normal[right], left, right))
    found.sort()
    return [(left, right) for _, _, _, left, right in found]


def _sentencepiece_json(vocab: GGUFVocab) -> str:
    from tokenizers import Tokenizer, decoders, models, normalizers

    unk = next((vocab.tokens[i] for i, t in enumerate(vocab.token_types) if t == UNKNOWN), None)
    bpe = models.BPE(
        vocab={token: i for i, token in enumerate(vocab.tokens)},
        merges=sentencepiece_merges(vocab),
        unk_token=unk,
        fuse_unk=True,
        byte_fallback=True,
    )
    tokenizer = Tokenizer(bpe)
    steps = [normalizers.Replace(" ", SPACE)]
    decode = [decoders.Replace(SPACE, " "), decoders.ByteFallback(), decoders.Fuse()]
    if vocab.add_space_prefix:
        steps.insert(0, normalizers.Prepend(SPACE))
        decode.append(decoders.Strip(" ", 1, 0))
    tokenizer.normalizer = normalizers.Sequence(steps)
    tokenizer.decoder = decoders.Sequence(decode)
    _add_special_tokens(tokenizer, vocab)
    template = _bos_template(vocab)
    if template is not None:
        tokenizer.post_processor = template
    return str(tokenizer.to_str())


def tokenizer_config(vocab: GGUFVocab) -> dict[str, Any]:
    """``tokenizer_config.json`` for the rebuilt tokenizer: special tokens, bos handling and the
    chat template (transformers and fleetgui's chat rendering read it there)."""
    config: dict[str, Any] = {
        "tokenizer_class": "PreTrainedTokenizerFast",
        "add_bos_token": vocab.add_bos,
        "add_eos_token": False,
        "clean_up_tokenization_spaces": False,
        "model_max_length": 1_000_000,
    }
    for key, token_id in (("bos_token", vocab.bos_id), ("eos_token", vocab.eos_id)):
        text = vocab.token(token_id)
        if text is not None:
            config[key] = text
    unk = vocab.tokens.index("<unk>") if "<unk>" in vocab.tokens else None
    if unk is not None:
        config["unk_token"] = "<unk>"
    if vocab.chat_template:
        config["chat_template"] = vocab.chat_template
    if vocab.chat_format:
        from fleetgui.export.chat_formats import FORMAT_KEY

        config[FORMAT_KEY] = vocab.chat_format
    return config


def end_of_turn_ids(vocab: GGUFVocab) -> list[int]:
    """The eos id and the chat format's end-of-turn tokens the vocabulary has (a chat model's
    GGUF names only one eos; its template ends turns with another, e.g. ``<|im_end|>``)."""
    from fleetgui.export.chat_formats import FORMATS

    ids = [] if vocab.eos_id is None else [vocab.eos_id]
    chosen = FORMATS.get(vocab.chat_format)  # a built-in format: its own end tokens
    ends = chosen.end_tokens if chosen else ()
    for text in ("<|im_end|>", "<|eot_id|>", "<|end|>", "<end_of_turn>", "<|endoftext|>", *ends):
        if text in vocab.tokens:
            index = vocab.tokens.index(text)
            template = vocab.chat_template or ""
            if index not in ids and (text in template or index == vocab.eos_id or text in ends):
                ids.append(index)
    return ids


def _decoded_token(vocab: GGUFVocab, token_id: int) -> str | None:
    """What a normal token stands for, or None when its bytes are not whole UTF-8."""
    from tokenizers import decoders

    if vocab.model == "llama":
        return vocab.tokens[token_id].replace(SPACE, " ")
    try:
        return str(decoders.ByteLevel().decode([vocab.tokens[token_id]]))
    except Exception:  # a token outside the byte alphabet
        return None


def check_tokenizer(tokenizer_json: str, vocab: GGUFVocab, texts: Sequence[str] = ()) -> None:
    """Prove the rebuilt tokenizer against the GGUF file's vocabulary, or raise
    ``GGUFTokenizerError`` naming the first disagreement.

    Checked: every token id decodes to the token's own text; every control and user-defined token
    encodes to its id; a sample of whole-word tokens encodes to itself; ``texts`` (and
    :data:`ROUND_TRIP_TEXTS`) decode back to themselves.
    """
    from tokenizers import Tokenizer

    tokenizer = Tokenizer.from_str(tokenizer_json)
    if tokenizer.get_vocab_size() != len(vocab.tokens):
        raise GGUFTokenizerError(
            f"the rebuilt tokenizer has {tokenizer.get_vocab_size()} tokens, the GGUF file "
            f"{len(vocab.tokens)}"
        )
    for token_id in vocab.special_ids():
        got = tokenizer.encode(vocab.tokens[token_id], add_special_tokens=False).ids
        if got != [token_id]:
            raise GGUFTokenizerError(
                f"special token {vocab.tokens[token_id]!r} encodes to {got}, not [{token_id}]"
            )
    checked = 0
    for token_id in range(0, len(vocab.tokens), max(1, len(vocab.tokens) // 2000)):
        if vocab.token_types[token_id] != NORMAL:
            continue
        text = _decoded_token(vocab, token_id)
        if not text or "\ufffd" in text:
            continue
        decoded = tokenizer.decode([token_id], skip_special_tokens=False)
        if decoded != text and not (vocab.add_space_prefix and " " + decoded == text):
            raise GGUFTokenizerError(f"token {token_id} does not decode to {text!r}")
        word = text.strip()
        if text == " " + word and word.isalpha():  # " Paris" is one token and must stay one
            query = word if vocab.add_space_prefix else text  # the prefix is the space
            got = tokenizer.encode(query, add_special_tokens=False).ids
            if got != [token_id]:
                raise GGUFTokenizerError(f"{text!r} encodes to {got}, not to its token {token_id}")
            checked += 1
    for text in (*ROUND_TRIP_TEXTS, *texts):
        ids = tokenizer.encode(text, add_special_tokens=False).ids
        back = tokenizer.decode(ids, skip_special_tokens=False)
        if back != text:
            raise GGUFTokenizerError(f"{text!r} round-trips to {back!r}")
    log.info("GGUF tokenizer checked: %d whole-word tokens, %d texts", checked, len(texts) + 5)


def write_tokenizer_files(vocab: GGUFVocab, folder: Any) -> list[str]:
    """Write ``tokenizer.json``, ``tokenizer_config.json`` and ``special_tokens_map.json`` to
    ``folder`` (checked first); returns the names written."""
    from pathlib import Path

    from fleetgui.fsutil import atomic_write_text

    text = build_tokenizer_json(vocab)
    check_tokenizer(text, vocab)
    folder = Path(folder)
    config = tokenizer_config(vocab)
    special = {k: config[k] for k in ("bos_token", "eos_token", "unk_token") if k in config}
    atomic_write_text(folder / "tokenizer.json", text)
    atomic_write_text(folder / "tokenizer_config.json", json.dumps(config, indent=2))
    atomic_write_text(folder / "special_tokens_map.json", json.dumps(special, indent=2))
    return ["tokenizer.json", "tokenizer_config.json", "special_tokens_map.json"]
