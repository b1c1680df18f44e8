"""Does the target write Python? Greedy completions of held-out code, checked by the compiler.

Prompts are the first lines of top-level ``def``/``class`` blocks of held-out files (code the
model never trained on), so each prompt is the start of a valid program. A completion counts as
valid when prompt + completion, cut after its last full line, is a valid *prefix* of a Python
program: :func:`codeop.compile_command` compiles it, or says that more input is needed, rather
than raising a syntax error (an unclosed bracket or an open block is fine; ``if x in:`` is
not). Greedy decoding of a small model also repeats itself, which the compiler accepts, so the
share of distinct token 4-grams is measured beside it.
"""

from __future__ import annotations

import codeop
import logging
import warnings
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from transformers import LlamaForCausalLM, PreTrainedTokenizerFast

log = logging.getLogger(__name__)

#: Lines of each prompt, from a top-level ``def``/``class`` line down.
PROMPT_LINES = 3


def valid_python_prefix(text: str) -> bool:
    """Whether ``text`` cut after its last newline could begin a valid Python program."""
    cut = text[: text.rfind("\n") + 1]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # SyntaxWarning for odd escapes or literals
        try:
            codeop.compile_command(cut, symbol="exec")
        except (SyntaxError, ValueError, OverflowError):
            return False
    return True


def distinct_ngram_share(tokens: Sequence[int], n: int = 4) -> float:
    """Distinct ``n``-grams of ``tokens`` over all of them (1 - the "seq-rep-n" of Welleck et
    al. 2019): 1.0 when nothing repeats, near 0 for a loop; 1.0 for fewer than ``n`` tokens."""
    grams = [tuple(tokens[i : i + n]) for i in range(len(tokens) - n + 1)]
    return len(set(grams)) / len(grams) if grams else 1.0


def block_prompts(texts: Sequence[str], count: int, lines: int = PROMPT_LINES) -> list[str]:
    """``count`` prompts: the first ``lines`` lines of top-level ``def``/``class`` blocks,
    evenly spaced over every such block of ``texts`` (in order; fewer if there are fewer)."""
    starts: list[str] = []
    for text in texts:
        rows = text.split("\n")
        for index, row in enumerate(rows):
            if row.startswith(("def ", "class ")) and index + lines <= len(rows):
                starts.append("\n".join(rows[index : index + lines]) + "\n")
    if len(starts) <= count:
        return starts
    return [starts[i * len(starts) // count] for i in range(count)]


@dataclass(frozen=True)
class PythonQuality:
    """Greedy completions of held-out code prompts, as the compiler and a reader see them."""

    prompts: int
    new_tokens: int
    valid_prefix: float  # share of completions that are a valid Python prefix
    distinct_4grams: float  # mean share of distinct token 4-grams in a completion

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready form (recorded in ``demo_model.json``)."""
        return {
            "prompts": self.prompts,
            "new_tokens": self.new_tokens,
            "valid_prefix": round(self.valid_prefix, 4),
            "distinct_4grams": round(self.distinct_4grams, 4),
        }


def measure_python(
    model: LlamaForCausalLM,
    tokenizer: PreTrainedTokenizerFast,
    prompts: Sequence[str],
    new_tokens: int,
) -> PythonQuality:
    """Complete each prompt greedily by ``new_tokens`` tokens and check the results."""
    from fleetgui.training.continuations import greedy_continuation
    from fleetgui.training.toy_pair.spec import EOS_ID

    if not prompts:
        raise ValueError("no prompts to measure: the held-out files hold no def/class block")
    valid = 0
    distinct = 0.0
    for prompt in prompts:
        new = greedy_continuation(model, tokenizer, prompt, new_tokens)
        if EOS_ID in new:  # the end of a file: what follows would start another one
            new = new[: new.index(EOS_ID)]
        completion = str(tokenizer.decode(new))
        valid += valid_python_prefix(prompt + completion)
        distinct += distinct_ngram_share(new)
    result = PythonQuality(len(prompts), new_tokens, valid / len(prompts), distinct / len(prompts))
    log.info(
        "held-out code prompts: %.0f%% of greedy completions valid Python, %.0f%% distinct 4-grams",
        100 * result.valid_prefix,
        100 * result.distinct_4grams,
    )
    return result
