"""How the demo build judges its target's code (fast unit tests)."""

from __future__ import annotations

import pytest

from fleetgui.training.toy_pair.python_quality import (
    block_prompts,
    distinct_ngram_share,
    valid_python_prefix,
)


@pytest.mark.parametrize(
    ("text", "valid"),
    [
        ("def f(x):\n    if x:\n", True),  # an open block: more input needed, not an error
        ("def f(x):\n    return (None, 1, 1,\n", True),  # an open bracket, likewise
        ("class A:\n    def f(self):\n        self.a = 0\n        self.a = 0\n", True),
        ("def f(x):\n    return x\n    retur", True),  # the unfinished last line is cut
        ("def f(x):\n    return (None, 1))\n", False),  # an unmatched bracket
        ("def f(x):\n    if not isinstance(not in str):\n", False),
        ("def f():\n    import _from distutils\n", False),
        ("def f(:\n", False),
    ],
)
def test_valid_python_prefix_accepts_unfinished_code_but_not_errors(text: str, valid: bool) -> None:
    assert valid_python_prefix(text) is valid


def test_distinct_ngram_share_sees_a_loop() -> None:
    assert distinct_ngram_share(list(range(20))) == 1.0
    assert distinct_ngram_share([1, 2, 3]) == 1.0  # too short to repeat a 4-gram
    loop = [5, 6] * 20
    assert distinct_ngram_share(loop) == pytest.approx(2 / 37)
    half = list(range(20)) + [7] * 20
    assert 0.5 < distinct_ngram_share(half) < 0.6


def test_block_prompts_start_at_top_level_definitions_evenly_spread() -> None:
    files = [
        "import os\n\ndef a(x):\n    return x\n\nclass B:\n    x = 1\n    y = 2\n",
        "def c():\n    pass\n\n    def nested():\n        pass\n",
        "x = 1\n",
    ]
    every = block_prompts(files, 10, lines=2)
    assert every == ["def a(x):\n    return x\n", "class B:\n    x = 1\n", "def c():\n    pass\n"]
    assert block_prompts(files, 2, lines=2) == [every[0], every[1]]
    assert block_prompts(files, 10, lines=4) == [
        "def a(x):\n    return x\n\nclass B:\n",
        "class B:\n    x = 1\n    y = 2\n\n",
        "def c():\n    pass\n\n    def nested():\n",
    ]
