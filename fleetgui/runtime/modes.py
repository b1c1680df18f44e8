"""The decoding modes the CLI and the API accept, and what each one implies.

``pp`` and ``pp+sd`` run one stream at a time by default; the ``+mb`` modes interleave several
streams across the stages. Interleaving needs no draft: ``pp+mb`` interleaves plain decode steps.
"""

from __future__ import annotations

from typing import Final

MODES: Final = ("pp", "pp+mb", "pp+sd", "pp+sd+mb")


def is_speculative(mode: str) -> bool:
    """Whether ``mode`` decodes speculatively (it needs a drafter)."""
    return "+sd" in mode


def interleaves(mode: str) -> bool:
    """Whether ``mode`` runs several streams at once, interleaved across the stages."""
    return mode.endswith("+mb")
