"""Make torch and transformers importable beside optimum-intel's torchvision requirement.

optimum-intel 2.2.0 requires ``torchvision``, and pip resolves PyPI's build of it. Next to the CPU
build of torch 2.13 that build fails at import (``operator torchvision::nms does not exist``), and
transformers imports it eagerly as soon as Pillow is present, so even ``LlamaConfig`` fails to
import. Language-model export never needs torchvision, so fleetgui hides it from the import system
before transformers is imported. Set ``FLEETGUI_ALLOW_TORCHVISION=1`` to keep it visible (for a
torch/torchvision pair that does load together).
"""

from __future__ import annotations

import logging
import os
import sys

log = logging.getLogger(__name__)


def hide_torchvision() -> None:
    """Hide torchvision from ``import`` unless ``FLEETGUI_ALLOW_TORCHVISION=1``. Idempotent."""
    if os.environ.get("FLEETGUI_ALLOW_TORCHVISION") == "1":
        return
    if "torchvision" in sys.modules and sys.modules["torchvision"] is not None:
        return  # already imported successfully by someone else: leave it alone
    sys.modules["torchvision"] = None  # type: ignore[assignment]
    log.debug("torchvision hidden from imports (not needed for language-model export)")
