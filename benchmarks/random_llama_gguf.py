"""A realistic-size Llama with random weights as a Q8_0 GGUF, for benchmarks that need a model
of a size people run (about 1.2B parameters) that no hub download can provide here.

The shape of Llama 3.2 1B (hidden 2048, 16 layers, 32 query and 8 KV heads, feed-forward 8192)
with SmolLM2's tokenizer and chat template, copied from the demo's GGUF (49,152 tokens), and
weights drawn at random (std 0.02; norms 1). Written once into the bench cache.

Run: ``.venv/bin/python benchmarks/random_llama_gguf.py [--export]`` (prints the GGUF's path,
or with ``--export`` that of its 2-stage int8 export, made once).
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

import numpy as np
from common import bench_cache

log = logging.getLogger("benchmarks")

HIDDEN, LAYERS, HEADS, KV_HEADS, FFN = 2048, 16, 32, 8, 8192
NAME = "random-llama-1b-q8_0.gguf"


def tokenizer_fields(source: Path) -> dict[str, Any]:
    """The tokenizer and chat-template fields of the GGUF ``source``, as (value, type)."""
    import gguf

    reader = gguf.GGUFReader(str(source))
    fields: dict[str, Any] = {}
    for name, field in reader.fields.items():
        if name.startswith("tokenizer."):
            fields[name] = field
    return fields


def write(out: Path, source: Path, seed: int = 0) -> Path:
    """Write the model to ``out`` (tokenizer from ``source``, SmolLM2's GGUF)."""
    import gguf

    fields = tokenizer_fields(source)
    tokens = [bytes(p).decode("utf-8") for p in _array(fields["tokenizer.ggml.tokens"])]
    vocab = len(tokens)
    head_dim = HIDDEN // HEADS
    writer = gguf.GGUFWriter(str(out), "llama")
    writer.add_name("random-llama-1b")
    writer.add_block_count(LAYERS)
    writer.add_context_length(8192)
    writer.add_embedding_length(HIDDEN)
    writer.add_feed_forward_length(FFN)
    writer.add_head_count(HEADS)
    writer.add_head_count_kv(KV_HEADS)
    writer.add_rope_freq_base(500000.0)
    writer.add_layer_norm_rms_eps(1e-5)
    writer.add_rope_dimension_count(head_dim)
    writer.add_vocab_size(vocab)
    writer.add_tokenizer_model("gpt2")
    writer.add_tokenizer_pre("smollm")
    writer.add_token_list(tokens)
    writer.add_token_types([int(t[0]) for t in _array(fields["tokenizer.ggml.token_type"])])
    merges = [bytes(m).decode("utf-8") for m in _array(fields["tokenizer.ggml.merges"])]
    writer.add_token_merges(merges)
    for key, add in (
        ("tokenizer.ggml.bos_token_id", writer.add_bos_token_id),
        ("tokenizer.ggml.eos_token_id", writer.add_eos_token_id),
    ):
        add(int(_array(fields[key])[0][0]))
    template = fields.get("tokenizer.chat_template")
    if template is not None:
        writer.add_chat_template(bytes(_array(template)[0]).decode("utf-8"))
    rng = np.random.default_rng(seed)

    def matrix(name: str, rows: int, cols: int) -> None:
        data = (rng.standard_normal((rows, cols), dtype=np.float32) * 0.02).astype(np.float32)
        quantized = gguf.quants.quantize(data, gguf.GGMLQuantizationType.Q8_0)
        writer.add_tensor(name, quantized, raw_dtype=gguf.GGMLQuantizationType.Q8_0)

    def norm(name: str) -> None:
        writer.add_tensor(name, np.ones(HIDDEN, dtype=np.float32))

    matrix("token_embd.weight", vocab, HIDDEN)
    for layer in range(LAYERS):
        block = f"blk.{layer}"
        norm(f"{block}.attn_norm.weight")
        matrix(f"{block}.attn_q.weight", HIDDEN, HIDDEN)
        matrix(f"{block}.attn_k.weight", KV_HEADS * head_dim, HIDDEN)
        matrix(f"{block}.attn_v.weight", KV_HEADS * head_dim, HIDDEN)
        matrix(f"{block}.attn_output.weight", HIDDEN, HIDDEN)
        norm(f"{block}.ffn_norm.weight")
        matrix(f"{block}.ffn_gate.weight", FFN, HIDDEN)
        matrix(f"{block}.ffn_up.weight", FFN, HIDDEN)
        matrix(f"{block}.ffn_down.weight", HIDDEN, FFN)
    norm("output_norm.weight")
    matrix("output.weight", vocab, HIDDEN)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return out


def _array(field: Any) -> list[Any]:
    """A GGUF reader field's values (one per element; strings as bytes)."""
    return [field.parts[index] for index in field.data]


def random_llama_gguf() -> Path:
    """The model's GGUF in the bench cache, written the first time."""
    from fleetgui.demo.smollm2 import fetch_smollm2

    out = bench_cache() / NAME
    if not out.is_file():
        tmp = out.with_name(f".{NAME}.tmp")
        write(tmp, fetch_smollm2())
        tmp.rename(out)
        log.info("wrote %s (%.2f GB)", out, out.stat().st_size / 1e9)
    return out


def random_llama_export() -> Path:
    """The model exported in 2 stages with int8 weights, once."""
    from common import ensure_export

    return ensure_export(
        random_llama_gguf(), "random-llama-1b-2stages-int8", stages=2, weights="int8"
    )


if __name__ == "__main__":
    import sys

    logging.basicConfig(level=logging.INFO)
    print(random_llama_export() if "--export" in sys.argv else random_llama_gguf())
