"""The training corpus: the Python standard library's own source code.

Every machine with Python has it, so the demo models are built offline. Files are the ``.py``
files under ``sysconfig.get_paths()["stdlib"]`` minus test suites, third-party packages, data
tables and machine-specific generated modules. Each file is reduced to its code: docstrings and
comments (English prose, about half the text, which a model this small cannot learn in minutes)
are dropped and the layout is normalised by ``ast.unparse``; files that do not parse are skipped.
Files are split deterministically into a training part and a held-out part (by a hash of their
relative path), and a fixed number of bytes of the training part is used.

The stdlib differs between Python versions (and slightly between builds), so the corpus, and with
it the built weights, are reproducible for one Python version; :attr:`Corpus.sha256` identifies
the exact text.
"""

from __future__ import annotations

import ast
import hashlib
import logging
import sys
import sysconfig
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Any

log = logging.getLogger(__name__)

#: Folder names that exclude everything below them.
EXCLUDED_DIRS: frozenset[str] = frozenset(
    {
        "site-packages",
        "dist-packages",
        "__pycache__",
        "test",
        "tests",
        "idle_test",
        "idlelib",
        "turtledemo",
        "pydoc_data",
        "encodings",
        "lib-dynload",
        "ensurepip",
        "venv",
    }
)
#: File name prefixes that are excluded (tests and build-specific generated modules).
EXCLUDED_PREFIXES: tuple[str, ...] = ("test_", "_sysconfigdata", "_test", "__phello__")


@dataclass(frozen=True)
class CorpusFile:
    """One source file: its path relative to the stdlib folder (POSIX form) and its text."""

    relpath: str
    text: str


@dataclass(frozen=True)
class Corpus:
    """Training and held-out files, each in a deterministic order."""

    root: str
    train: tuple[CorpusFile, ...]
    heldout: tuple[CorpusFile, ...]
    eligible_files: int

    @property
    def train_bytes(self) -> int:
        """UTF-8 size of the training text."""
        return sum(len(f.text.encode("utf-8")) for f in self.train)

    @property
    def sha256(self) -> str:
        """Hash of the training and held-out files' paths and texts."""
        digest = hashlib.sha256()
        for part, files in (("train", self.train), ("heldout", self.heldout)):
            for f in files:
                digest.update(f"{part}\0{f.relpath}\0".encode())
                digest.update(f.text.encode("utf-8"))
                digest.update(b"\0")
        return digest.hexdigest()

    def describe(self) -> dict[str, Any]:
        """JSON-ready description, recorded in ``demo_model.json``."""
        return {
            "source": "Python standard library .py files (sysconfig stdlib path)",
            "preprocessing": "docstrings and comments removed, layout of ast.unparse",
            "python_version": sys.version.split()[0],
            "stdlib_root": self.root,
            "eligible_files": self.eligible_files,
            "train_files": len(self.train),
            "train_bytes": self.train_bytes,
            "heldout_files": len(self.heldout),
            "excluded_dirs": sorted(EXCLUDED_DIRS),
            "excluded_prefixes": list(EXCLUDED_PREFIXES),
            "sha256": self.sha256,
        }


def stdlib_root() -> Path:
    """The folder holding the standard library's ``.py`` files."""
    return Path(sysconfig.get_paths()["stdlib"])


def is_eligible(relpath: str) -> bool:
    """Whether the stdlib file at ``relpath`` (POSIX, relative) belongs in the corpus."""
    parts = relpath.split("/")
    if not parts[-1].endswith(".py"):
        return False
    if any(p in EXCLUDED_DIRS or p.startswith("config-") for p in parts[:-1]):
        return False
    return not parts[-1].startswith(EXCLUDED_PREFIXES)


def _path_hash(relpath: str) -> int:
    return int.from_bytes(hashlib.sha256(relpath.encode()).digest()[:8], "big")


def is_heldout(relpath: str, holdout_percent: int) -> bool:
    """Deterministic split: a file is held out when its path hash falls in the first
    ``holdout_percent`` of 100 buckets."""
    return _path_hash(relpath) % 100 < holdout_percent


class _DropDocstrings(ast.NodeTransformer):
    """Removes the docstring of every module, class and function."""

    def _drop(self, node: ast.AST) -> ast.AST:
        self.generic_visit(node)
        body = getattr(node, "body", [])
        first = body[0] if body else None
        if (
            isinstance(first, ast.Expr)
            and isinstance(first.value, ast.Constant)
            and isinstance(first.value.value, str)
        ):
            node.body = body[1:] or [ast.Pass()]  # type: ignore[attr-defined]
        return node

    visit_Module = visit_ClassDef = visit_FunctionDef = visit_AsyncFunctionDef = _drop  # noqa: N815


def code_only(text: str) -> str | None:
    """``text`` without docstrings and comments, in ``ast.unparse``'s layout; None when it is
    not valid Python for this interpreter."""
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # invalid escapes in old string literals
            tree = ast.parse(text)
        return ast.unparse(_DropDocstrings().visit(tree)) + "\n"
    except (SyntaxError, ValueError, RecursionError):
        return None


def read_source(path: Path, max_bytes: int) -> str | None:
    """The code of the file (see :func:`code_only`) cut at a line boundary to about
    ``max_bytes``; None when the file does not parse."""
    text = code_only(path.read_bytes().decode("utf-8", errors="replace"))
    if text is None:
        return None
    if len(text) > max_bytes:
        cut = text.rfind("\n", 0, max_bytes)
        text = text[: cut + 1 if cut > 0 else max_bytes]
    return text


def list_eligible(root: Path) -> list[str]:
    """Sorted relative POSIX paths of the eligible ``.py`` files under ``root``."""
    rels = (p.relative_to(root).as_posix() for p in root.rglob("*.py") if p.is_file())
    return sorted(r for r in rels if is_eligible(r))


def load_corpus(
    corpus_bytes: int,
    max_file_bytes: int,
    holdout_percent: int = 10,
    root: Path | None = None,
) -> Corpus:
    """Select the training and held-out files.

    Training files are taken in path-hash order (a fixed pseudo-random order, so the subset
    spans many modules) until ``corpus_bytes`` of text are collected; each file contributes at
    most ``max_file_bytes``. Held-out files, in the same order, are never used for training;
    about ``corpus_bytes / 8`` of them are kept.
    """
    root = stdlib_root() if root is None else Path(root)
    eligible = list_eligible(root)
    if not eligible:
        raise FileNotFoundError(f"no Python standard library sources found under {root}")
    ordered = sorted(eligible, key=lambda r: (_path_hash(r), r))
    heldout_bytes = corpus_bytes // 8
    train: list[CorpusFile] = []
    heldout: list[CorpusFile] = []
    total = held_total = 0
    for rel in ordered:
        held = is_heldout(rel, holdout_percent)
        full = held_total >= heldout_bytes if held else total >= corpus_bytes
        if full:
            continue
        text = read_source(root / rel, max_file_bytes)
        if text is None or not text.strip():
            continue
        if held:
            heldout.append(CorpusFile(rel, text))
            held_total += len(text.encode("utf-8"))
        else:
            train.append(CorpusFile(rel, text))
            total += len(text.encode("utf-8"))
    corpus = Corpus(str(root), tuple(train), tuple(heldout), len(eligible))
    log.info(
        "corpus: %d training files (%.2f MB), %d held out, from %d eligible stdlib files",
        len(train),
        corpus.train_bytes / 1e6,
        len(heldout),
        len(eligible),
    )
    return corpus
