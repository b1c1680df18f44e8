"""HuggingFace model to per-stage OpenVINO shards: adapters, tracing, compression, verification."""

from fleetgui.torch_env import hide_torchvision

hide_torchvision()
