"""What the tests of ``fleetgui.training`` share: an untrained tiny Llama in memory."""

from __future__ import annotations

from typing import Any


def random_llama(seed: int = 0) -> Any:
    """A 2-layer tiny Llama (``model_factory.make_config``'s dims) initialised by transformers
    from ``torch.manual_seed(seed)``, in eval mode."""
    import torch
    from model_factory import make_config

    from fleetgui.torch_env import hide_torchvision

    hide_torchvision()
    from transformers import LlamaForCausalLM

    torch.manual_seed(seed)
    return LlamaForCausalLM(make_config("llama", n_layers=2)).eval()
