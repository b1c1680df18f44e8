"""The toy pair's tokenizer: byte-level BPE trained on the corpus, shared by target and draft."""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import TYPE_CHECKING

from fleetgui.training.toy_pair.spec import BOS_ID, BOS_TOKEN, EOS_ID, EOS_TOKEN, PAD_ID, PAD_TOKEN

if TYPE_CHECKING:
    from tokenizers import Tokenizer
    from transformers import PreTrainedTokenizerFast

log = logging.getLogger(__name__)

#: Pre-tokenization regex of Llama 3 (and, but for digits, Qwen 2): line breaks are split from
#: the indentation that follows them, so a prompt ending in ``":\n"`` ends at a token boundary
#: that also occurs in training (with GPT-2's regex, ``"\n" + indentation`` is one piece and
#: the model would never have seen a bare ``"\n"`` before an indented line).
SPLIT_PATTERN = (
    r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}"
    r"| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"
)


def train_tokenizer(texts: Sequence[str], vocab_size: int) -> Tokenizer:
    """Train a byte-level BPE ``tokenizers.Tokenizer`` with ``<|bos|>``/``<|eos|>``/``<|pad|>``
    as ids 0/1/2. Training is deterministic for the same texts."""
    from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers, processors, trainers

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.Sequence(
        [
            pre_tokenizers.Split(Regex(SPLIT_PATTERN), behavior="isolated"),
            pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False),
        ]
    )
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        min_frequency=2,
        special_tokens=[BOS_TOKEN, EOS_TOKEN, PAD_TOKEN],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator(list(texts), trainer=trainer)
    ids = [tok.token_to_id(t) for t in (BOS_TOKEN, EOS_TOKEN, PAD_TOKEN)]
    if ids != [BOS_ID, EOS_ID, PAD_ID]:
        raise RuntimeError(f"unexpected special token ids {ids}")
    # Llama-style: <|bos|> is prepended when add_special_tokens=True (the HF default).
    tok.post_processor = processors.TemplateProcessing(
        single=f"{BOS_TOKEN} $A",
        pair=f"{BOS_TOKEN} $A {BOS_TOKEN} $B",
        special_tokens=[(BOS_TOKEN, BOS_ID)],
    )
    log.info("tokenizer: byte-level BPE, %d tokens", tok.get_vocab_size())
    return tok


def wrap_tokenizer(tok: Tokenizer, max_positions: int) -> PreTrainedTokenizerFast:
    """Wrap ``tok`` as a transformers ``PreTrainedTokenizerFast`` (what ``save_pretrained``
    writes and ``AutoTokenizer`` loads)."""
    from fleetgui.torch_env import hide_torchvision

    hide_torchvision()
    from transformers import PreTrainedTokenizerFast

    return PreTrainedTokenizerFast(
        tokenizer_object=tok,
        bos_token=BOS_TOKEN,
        eos_token=EOS_TOKEN,
        pad_token=PAD_TOKEN,
        model_max_length=max_positions,
        clean_up_tokenization_spaces=False,
    )


def encode_files(tok: Tokenizer, texts: Sequence[str]) -> list[list[int]]:
    """Token ids of each text, framed as ``<|bos|> text <|eos|>``."""
    encodings = tok.encode_batch_fast(list(texts), add_special_tokens=False)
    return [[BOS_ID, *enc.ids, EOS_ID] for enc in encodings]
