"""The offline toy pair: a small Llama target and a distilled draft, built on this CPU.

Both models are trained on the Python standard library's own source code (present wherever
Python is), with a byte-level BPE tokenizer trained on the same text, deterministically and in
minutes on a laptop CPU. The draft is distilled from the target so that speculative decoding
accepts most of its proposals. ``fleetgui demo --size`` serves it.

* :func:`build_demo_pair` builds a pair into a folder (atomically);
* :func:`ensure_demo_pair` reuses a complete cached build or builds one;
* :class:`DemoPair` points at the ``target/`` and ``draft/`` HF folders and the build record.

torch, transformers and tokenizers are imported only when a build runs.
"""

from fleetgui.training.toy_pair.builder import (
    INFO_FILE,
    DemoPair,
    build_demo_pair,
    default_dir,
    ensure_demo_pair,
    load_pair,
)
from fleetgui.training.toy_pair.spec import SIZES, DemoSpec, get_spec

__all__ = [
    "INFO_FILE",
    "SIZES",
    "DemoPair",
    "DemoSpec",
    "build_demo_pair",
    "default_dir",
    "ensure_demo_pair",
    "get_spec",
    "load_pair",
]
