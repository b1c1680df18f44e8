"""Shared pytest configuration and fixtures."""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from fleetgui.torch_env import hide_torchvision

os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")  # Qt widgets render without a screen
hide_torchvision()  # before any test imports transformers


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
    once per test session by ``fleetgui.demo.build_demo_pair`` (15 s on an idle 2-core PC)."""
    from fleetgui.demo import build_demo_pair

    out = tmp_path_factory.mktemp("demo_pair") / "demo-model-tiny"
    return build_demo_pair(out, "tiny").root
