"""The toy pair's training corpus (``fleetgui.training.toy_pair.corpus``): which of Python's own
source files it takes, their code without docstrings and comments, a stable held-out split."""

from __future__ import annotations

import pytest

from fleetgui.training.toy_pair.corpus import code_only, is_eligible, is_heldout


@pytest.mark.parametrize(
    ("relpath", "expected"),
    [
        ("argparse.py", True),
        ("asyncio/tasks.py", True),
        ("test/test_grammar.py", False),
        ("unittest/test/test_case.py", False),
        ("lib2to3/tests/data/bom.py", False),
        ("idlelib/editor.py", False),
        ("site-packages/torch/__init__.py", False),
        ("encodings/cp1252.py", False),
        ("_sysconfigdata__linux_x86_64-linux-gnu.py", False),
        ("README.txt", False),
    ],
)
def test_corpus_excludes_tests_packages_and_generated_files(relpath: str, expected: bool) -> None:
    assert is_eligible(relpath) is expected


def test_corpus_keeps_code_without_docstrings_and_comments() -> None:
    source = (
        '"""Module docstring."""\n'
        "import os  # a comment\n"
        "class A:\n"
        '    """Class docstring."""\n'
        "    def f(self, x):\n"
        '        """Method docstring."""\n'
        '        return os.path.join(x, "doc")\n'
        "    async def g(self):\n"
        '        """Only a docstring."""\n'
    )
    code = code_only(source)
    assert code is not None
    assert "docstring" not in code and "comment" not in code
    assert "return os.path.join(x, 'doc')" in code  # ast.unparse's layout
    assert "async def g(self):\n        pass" in code
    compile(code, "<code>", "exec")
    assert code_only("def broken(:\n") is None
    assert code_only("print 'python 2'\n") is None


def test_heldout_split_is_stable_and_about_ten_percent() -> None:
    names = [f"mod{i}.py" for i in range(2000)]
    held = [n for n in names if is_heldout(n, 10)]
    assert 150 < len(held) < 250
    assert held == [n for n in names if is_heldout(n, 10)]
