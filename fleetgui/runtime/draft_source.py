"""Where PP+SD's drafts come from: a draft export folder, or ``ngram`` (no draft model)."""

from __future__ import annotations

from pathlib import Path
from typing import Final, Literal, TypeAlias

NGRAM: Final = "ngram"  # what `--draft ngram` (and the app's draft picker) choose
NGRAM_LABEL: Final = "n-gram (no draft model)"

DraftSource: TypeAlias = Path | Literal["ngram"]


def parse_draft(text: str) -> DraftSource:
    """``ngram`` (any case) for the draft-free drafter, else a draft export folder. A folder
    that happens to be called ngram is given as ``ngram/`` or ``./ngram``."""
    if text.strip().lower() == NGRAM:
        return NGRAM
    return Path(text)


def draft_label(source: DraftSource) -> str:
    """How the app and the logs name a draft source."""
    return NGRAM_LABEL if source == NGRAM else Path(source).name
