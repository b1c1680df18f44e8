"""fleetgui: turn a fleet of Intel AI PCs into one private LLM server.

A HuggingFace decoder model is split by layer into per-stage OpenVINO shards, the shards are
spread over the PCs of a fleet, and the coordinator drives them as one pipeline.
"""

from fleetgui.shard import Shard

__version__ = "0.1.0"

__all__ = ["Shard", "__version__"]
