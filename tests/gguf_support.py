"""Writing GGUF files at test time from tiny HuggingFace Llama folders, the way llama.cpp's
converter lays them out (tensor names ``blk.N.*``, q/k rows permuted for its rotary layout, the
tokenizer as ``tokenizer.ggml.*`` fields), with the ``gguf`` package's writer."""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np

CHATML = (
    "{% for message in messages %}{{'<|im_start|>' + message['role'] + '\n' + message['content']"
    " + '<|im_end|>' + '\n'}}{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\n'"
    " }}{% endif %}"
)


def _permute(weights: np.ndarray, n_head: int) -> np.ndarray:
    """llama.cpp's q/k row order (its rotary pairs adjacent elements; HF's the two halves)."""
    return (
        weights.reshape(n_head, 2, weights.shape[0] // n_head // 2, *weights.shape[1:])
        .swapaxes(1, 2)
        .reshape(weights.shape)
    )


SPM_SPECIALS = ("<unk>", "<s>", "</s>")


def spm_vocab(corpus: Path, size: int) -> tuple[list[str], list[float], list[int], Any]:
    """A SentencePiece-style BPE vocabulary of exactly ``size`` tokens trained on ``corpus``:
    ``<unk> <s> </s>``, the pieces (``▁`` for spaces) in merge order, then the 256 byte tokens
    ``<0x00>``..``<0xFF>``; with scores (-rank, as SentencePiece's BPE writes them), GGUF token
    types and the trained ``tokenizers`` object (the reference for ids)."""
    from tokenizers import SentencePieceBPETokenizer

    trained = SentencePieceBPETokenizer(replacement="\u2581", add_prefix_space=True)
    trained.train_from_iterator(
        [corpus.read_text(encoding="utf-8")],
        vocab_size=size - 256,
        min_frequency=2,
        special_tokens=list(SPM_SPECIALS),
        show_progress=False,
    )
    pieces = [t for t, _ in sorted(trained.get_vocab().items(), key=lambda kv: kv[1])]
    tokens = pieces + [f"<0x{b:02X}>" for b in range(256)]
    if len(tokens) != size:
        raise RuntimeError(f"SentencePiece vocabulary has {len(tokens)} tokens, not {size}")
    types = [2 if t == "<unk>" else 3 if t in SPM_SPECIALS else 1 for t in pieces]
    types += [6] * 256
    scores = [0.0 if t in SPM_SPECIALS else -float(i) for i, t in enumerate(pieces)]
    scores += [0.0] * 256
    return tokens, scores, types, trained


def write_llama_gguf(
    model_dir: Path,
    out: Path,
    *,
    quantize: Callable[[str], str] = lambda name: "F32",
    architecture: str = "llama",
    chat_template: str | None = CHATML,
    pre: str = "default",
    sentencepiece: bool = False,
    chat_tokens: Sequence[str] = (),
) -> Path:
    """Write the Llama (or, with ``architecture="qwen2"``, the Qwen2) in ``model_dir`` as the
    GGUF file ``out``; ``quantize(gguf_name)`` picks each tensor's type ("F32", "F16", "Q8_0",
    or any raw type name, e.g. "Q8_1"). ``chat_tokens``: control tokens (a family's chat
    markers, e.g. ``<|im_start|>``) put in place of the BPE vocabulary's last tokens."""
    import gguf
    from safetensors.numpy import load_file

    config = json.loads((model_dir / "config.json").read_text())
    tokenizer = json.loads((model_dir / "tokenizer.json").read_text())
    weights = load_file(str(model_dir / "model.safetensors"))
    n_layers, n_head = config["num_hidden_layers"], config["num_attention_heads"]
    n_kv = config["num_key_value_heads"]
    head_dim = config.get("head_dim") or config["hidden_size"] // n_head

    writer = gguf.GGUFWriter(str(out), architecture)
    writer.add_name(model_dir.name)
    writer.add_block_count(n_layers)
    writer.add_context_length(config["max_position_embeddings"])
    writer.add_embedding_length(config["hidden_size"])
    writer.add_feed_forward_length(config["intermediate_size"])
    writer.add_head_count(n_head)
    writer.add_head_count_kv(n_kv)
    writer.add_rope_freq_base(float(config.get("rope_parameters", {}).get("rope_theta", 10000.0)))
    writer.add_layer_norm_rms_eps(config["rms_norm_eps"])
    writer.add_rope_dimension_count(head_dim)
    writer.add_key_length(head_dim)
    writer.add_value_length(head_dim)
    writer.add_vocab_size(config["vocab_size"])

    if sentencepiece:  # a Llama 2 / Gemma style vocabulary: pieces and scores, no merges
        from model_factory import CORPUS_PATH

        tokens, scores, types, _ = spm_vocab(CORPUS_PATH, config["vocab_size"])
        writer.add_tokenizer_model("llama")
        writer.add_token_list(tokens)
        writer.add_token_scores(scores)
        writer.add_token_types(types)
        writer.add_bos_token_id(tokens.index("<s>"))
        writer.add_eos_token_id(tokens.index("</s>"))
        writer.add_unk_token_id(tokens.index("<unk>"))
        writer.add_add_bos_token(True)
        writer.add_add_space_prefix(True)
    else:
        vocab: dict[str, int] = tokenizer["model"]["vocab"]
        tokens = [t for t, _ in sorted(vocab.items(), key=lambda kv: kv[1])]
        special = {t["content"] for t in tokenizer.get("added_tokens", []) if t.get("special")}
        merges = [m if isinstance(m, str) else " ".join(m) for m in tokenizer["model"]["merges"]]
        if chat_tokens:  # the last merges make the last tokens and feed no later merge
            tokens[-len(chat_tokens) :] = chat_tokens
            merges = merges[: -len(chat_tokens)]
            special |= set(chat_tokens)
        writer.add_tokenizer_model("gpt2")
        writer.add_tokenizer_pre(pre)
        writer.add_token_list(tokens)
        writer.add_token_types([3 if t in special else 1 for t in tokens])
        writer.add_token_merges(merges)
        writer.add_bos_token_id(config["bos_token_id"])
        writer.add_eos_token_id(config["eos_token_id"])
        writer.add_add_bos_token(True)
    if chat_template is not None:
        writer.add_chat_template(chat_template)

    arch = gguf.MODEL_ARCH.QWEN2 if architecture == "qwen2" else gguf.MODEL_ARCH.LLAMA
    names = gguf.get_tensor_name_map(arch, n_layers)
    permute = architecture == "llama"  # llama.cpp's converter permutes Llama's q/k only
    for hf_name, array in weights.items():
        base, suffix = hf_name.rsplit(".", 1)
        name = f"{names.get_name(base)}.{suffix}"
        data = array.astype(np.float32)
        if permute and ".attn_q." in name:
            data = _permute(data, n_head)
        elif permute and ".attn_k." in name:
            data = _permute(data, n_kv)
        _add_tensor(writer, name, data, quantize(name))
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return out


def _add_tensor(writer: Any, name: str, data: np.ndarray, kind: str) -> None:
    import gguf

    qtype = gguf.GGMLQuantizationType[kind]
    if kind == "F32":
        writer.add_tensor(name, data)
    elif kind == "F16":
        writer.add_tensor(name, data.astype(np.float16))
    elif data.ndim == 2 and kind in ("Q8_0", "Q4_0", "Q4_1", "Q5_0", "Q5_1"):
        writer.add_tensor(name, gguf.quants.quantize(data, qtype), raw_dtype=qtype)
    else:  # a type numpy cannot quantize: raw bytes of the right size (for refusal tests)
        block, size = gguf.GGML_QUANT_SIZES[qtype]
        rows, cols = data.reshape(data.shape[0], -1).shape
        raw = np.zeros((rows, cols // block * size), dtype=np.uint8)
        writer.add_tensor(name, raw, raw_dtype=qtype)
