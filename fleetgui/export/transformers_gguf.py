"""Loading a GGUF file into transformers (dequantized to torch), as the export's verification,
the demo's draft build and the tests' references do.

transformers maps GGUF tensor names to its own by building gguf-py's ``TensorNameMap`` once per
module of the model, each a walk over every architecture's names: much of a load's time
(docs/design-measurements.md). The map depends only on the architecture and the layer count and
is only read, so :func:`load_gguf_model` makes gguf-py build each one once.
"""

from __future__ import annotations

import functools
import logging
from pathlib import Path
from typing import Any

log = logging.getLogger(__name__)


def share_tensor_name_maps() -> None:
    """Make ``gguf.get_tensor_name_map`` build each (architecture, layers) map once. transformers
    imports it from ``gguf`` at each call, so the shared one is what it gets. Idempotent."""
    import gguf

    current = gguf.get_tensor_name_map
    if getattr(current, "cache_info", None) is not None:
        return
    gguf.get_tensor_name_map = functools.lru_cache(maxsize=16)(current)


def load_gguf_model(model_class: Any, gguf: Path, **kwargs: Any) -> Any:
    """``model_class.from_pretrained`` on the GGUF file ``gguf`` (``kwargs`` as there, e.g.
    ``dtype``), in eval mode, without transformers' progress bars."""
    from transformers.utils import logging as hf_logging

    share_tensor_name_maps()
    bars = hf_logging.is_progress_bar_enabled()
    hf_logging.disable_progress_bar()
    try:
        model = model_class.from_pretrained(str(gguf.parent), gguf_file=gguf.name, **kwargs)
    finally:
        if bars:
            hf_logging.enable_progress_bar()
    return model.eval()
