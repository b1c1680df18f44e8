"""What the SmolLM2 tests share: the prompts whose greedy continuations they compare with
transformers' (the ``smollm2_references`` fixture in conftest)."""

from __future__ import annotations

SMOLLM2_NEW_TOKENS = 48
SMOLLM2_PROMPTS = (
    "The history of the Roman Empire began",
    'def fibonacci(n):\n    """Return the n-th Fibonacci number."""\n',
)
