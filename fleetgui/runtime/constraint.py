"""Constrained decoding on the coordinator: a grammar (a JSON schema) as the allowed tokens of
each step, computed by llguidance.

llguidance was chosen over xgrammar and outlines-core (``benchmarks/bench_grammar.py``, figures
in ``docs/performance.md``): it has no dependencies, where xgrammar needs torch (the app's
install has none; importing it takes 1.8 s); a schema compiles in under a millisecond, where
outlines-core builds its index for 150-250 ms per schema (agents send new ones with every
request) and ignores integer bounds; and a step's mask takes about 10 us (0.3 ms at worst),
nothing beside a decode step. xgrammar's masks are faster still (2 us), which does not matter
at that scale. llguidance reads the export's ``tokenizer.json`` directly, so no transformers
tokenizer is loaded.

The mask of every position a pass decides travels with the head op (:class:`TokenMask`), so the
last stage applies it wherever it runs and only token ids come back. A speculative round's
masks follow the drafts: the mask after draft ``i`` assumes drafts ``1..i`` were accepted, which
is the only case in which the head reads it.
"""

from __future__ import annotations

import functools
import json
import logging
from collections.abc import Collection, Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from fleetgui.errors import FleetguiError
from fleetgui.runtime.schema_bounds import bounded
from fleetgui.runtime.token_mask import TokenMask

log = logging.getLogger(__name__)


class ConstraintError(FleetguiError):
    """A grammar or schema that cannot constrain the answer (the message says why)."""


def grammar_of_schema(schema: Mapping[str, Any]) -> str:
    """The llguidance grammar that makes an answer a JSON document valid against ``schema``."""
    import llguidance

    try:
        text = json.dumps(bounded(schema))
    except (TypeError, ValueError) as exc:
        raise ConstraintError(f"the JSON schema cannot be serialized: {exc}") from None
    return str(llguidance.LLMatcher.grammar_from_json_schema(text))


@functools.lru_cache(maxsize=4)
def _ll_tokenizer(tokenizer_json: Path, eos_ids: tuple[int, ...]) -> Any:
    import llguidance

    if not tokenizer_json.is_file():
        raise ConstraintError(
            f"structured output needs the export's {tokenizer_json.name}, and "
            f"{tokenizer_json.parent} has none: re-export the model with fleetgui"
        )
    return llguidance.LLTokenizer(
        tokenizer_json.read_text(encoding="utf-8"), eos_token=list(eos_ids) or None
    )


class GrammarEngine:
    """One export's vocabulary as llguidance knows it; makes a :class:`TokenConstraint` per
    constrained stream."""

    def __init__(self, tokenizer_dir: Path, eos_ids: Collection[int]) -> None:
        self.tokenizer_json = Path(tokenizer_dir) / "tokenizer.json"
        self.eos_ids = tuple(sorted(eos_ids))

    @property
    def tokenizer(self) -> Any:
        """llguidance's tokenizer (built once a process per export: about 0.2 s)."""
        return _ll_tokenizer(self.tokenizer_json, self.eos_ids)

    def check(self, grammar: str) -> None:
        """Raise :class:`ConstraintError` naming what is wrong with ``grammar``."""
        import llguidance

        is_error, messages = llguidance.LLMatcher.validate_grammar_with_warnings(
            grammar, self.tokenizer
        )
        if is_error:
            raise ConstraintError(f"the grammar or schema cannot be used: {'; '.join(messages)}")
        for message in messages:
            log.info("grammar warning: %s", message)

    def constraint(self, grammar: str) -> TokenConstraint:
        return TokenConstraint(self.tokenizer, grammar)


class TokenConstraint:
    """The grammar state of one answer: what each next token may be, advanced by the tokens
    the stream commits."""

    def __init__(self, tokenizer: Any, grammar: str) -> None:
        import llguidance

        self._matcher = llguidance.LLMatcher(tokenizer, grammar)
        if self._matcher.is_error():
            raise ConstraintError(f"the grammar cannot be used: {self._matcher.get_error()}")
        self._words = (int(tokenizer.vocab_size) + 31) // 32

    @property
    def done(self) -> bool:
        """Whether the grammar is complete and allows nothing but the end of the answer."""
        return bool(self._matcher.is_stopped())

    def mask(self, drafts: Sequence[int] = ()) -> TokenMask:
        """The allowed tokens of ``len(drafts) + 1`` positions: now, and after each draft as if
        the drafts before it were accepted. Past a draft the grammar refuses, rows allow every
        token: the head rejects that draft (its row does not allow it), so it never reads them.
        """
        import llguidance.numpy as lnp

        bits = np.full((len(drafts) + 1, self._words), -1, dtype=np.int32)
        matcher = self._matcher
        lnp.fill_next_token_bitmask(matcher, bits, 0)
        consumed = 0
        for row, draft in enumerate(drafts, start=1):
            if matcher.is_stopped() or matcher.try_consume_tokens([int(draft)]) != 1:
                break
            consumed += 1
            lnp.fill_next_token_bitmask(matcher, bits, row)
        if consumed:
            matcher.rollback(consumed)
        return TokenMask(bits.view(np.uint32))

    def accept(self, tokens: Sequence[int]) -> None:
        """Advance past ``tokens``, committed to the answer (an end token is not one)."""
        if tokens and not self._matcher.consume_tokens([int(t) for t in tokens]):
            # the head applied this grammar's masks, so only a bug gets here
            raise ConstraintError(
                f"the answer left its grammar at tokens {list(tokens)}: {self._matcher.get_error()}"
            )
