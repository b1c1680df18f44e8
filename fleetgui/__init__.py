"""fleetgui: turn a fleet of Intel AI PCs into one private LLM server.

A decoder model is split by layer into per-stage OpenVINO shards, the shards are spread over
the PCs of a fleet, and the coordinator drives them as one pipeline. From Python::

    import fleetgui

    with fleetgui.open("shards/llama8b", workers=["192.168.1.20:5555"]) as llm:
        print(llm.generate("def quicksort(items):", max_new_tokens=64))

See :func:`open`, :class:`LLMPipeline` and :class:`GenerationConfig`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from fleetgui.shard import Shard

if TYPE_CHECKING:
    from fleetgui.assembler import aopen, open
    from fleetgui.generation_config import GenerationConfig
    from fleetgui.llm_pipeline import LLMPipeline

__version__ = "0.1.0"

__all__ = ["GenerationConfig", "LLMPipeline", "Shard", "__version__", "aopen", "open"]

_ASSEMBLER = {"GenerationConfig", "LLMPipeline", "aopen", "open"}


def __getattr__(name: str) -> Any:
    # the assembler imports OpenVINO and the fleet only when used: a worker imports fleetgui
    # and must stay lean
    if name in _ASSEMBLER:
        from fleetgui import assembler

        return getattr(assembler, name)
    raise AttributeError(f"module 'fleetgui' has no attribute {name!r}")
