"""A model's own greedy continuations of prompts, the teacher's side of distilling a draft.

:func:`greedy_generate` continues equal-length prompts by a fixed number of tokens (the toy
pair's corpus windows); :func:`greedy_continuation` does it for one text prompt.

For a chat model, :func:`continue_prompts` decodes batches of prompts of different lengths
greedily (left-padded, with a KV cache), stops each row at an end-of-turn token and drops
finished rows from the batch, so a short answer does not pay for the longest one. At every
position whose next token it chose it keeps the model's final hidden state (after the last
norm): with a tied or shared output head that state gives back the model's logits over any
subset of the vocabulary, which is what the draft is distilled against, for 576 floats a
position instead of 49152 logits.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import torch
    from transformers import LlamaForCausalLM, PreTrainedTokenizerFast

log = logging.getLogger(__name__)

#: ``on_batch(done, total)`` after each batch.
BatchCallback = Callable[[int, int], None]


def greedy_generate(
    model: LlamaForCausalLM,
    prompts: torch.Tensor,
    new_tokens: int,
    batch_size: int,
    on_batch: BatchCallback | None = None,
) -> torch.Tensor:
    """Greedy continuation of equal-length ``prompts`` (``(N, P)`` ids) by ``new_tokens``
    tokens, with a KV cache. Returns ``(N, P + new_tokens)`` ids.

    End-of-text tokens do not stop the continuation (every row gets the same length).
    """
    import torch

    model.eval()
    outputs = []
    total = (prompts.shape[0] + batch_size - 1) // batch_size
    with torch.inference_mode():
        for index, start in enumerate(range(0, prompts.shape[0], batch_size)):
            ids = prompts[start : start + batch_size]
            out = model(input_ids=ids, use_cache=True)
            past = out.past_key_values
            tokens = [out.logits[:, -1].argmax(-1)]
            for _ in range(new_tokens - 1):
                out = model(input_ids=tokens[-1][:, None], past_key_values=past, use_cache=True)
                past = out.past_key_values
                tokens.append(out.logits[:, -1].argmax(-1))
            outputs.append(torch.cat([ids, torch.stack(tokens, dim=1)], dim=1))
            if on_batch is not None:
                on_batch(index + 1, total)
    return torch.cat(outputs, dim=0)


def greedy_continuation(
    model: LlamaForCausalLM, tokenizer: PreTrainedTokenizerFast, prompt: str, new_tokens: int
) -> list[int]:
    """The ids of ``model``'s greedy continuation of the text ``prompt`` (``new_tokens``)."""
    import torch

    ids = torch.tensor([tokenizer(prompt)["input_ids"]], dtype=torch.long)
    out = greedy_generate(model, ids, new_tokens, batch_size=1)
    return [int(i) for i in out[0, ids.shape[1] :].tolist()]


@dataclass
class Continuation:
    """A prompt and the model's continuation of it.

    ``hidden[j]`` and ``top_ids[j]`` are the model's final hidden state and its most likely next
    tokens at position ``prompt_len - 1 + j``, where it chose ``ids[prompt_len + j]``.
    """

    ids: list[int]
    prompt_len: int
    hidden: torch.Tensor | None  # (G, H) float32, or None when not kept
    top_ids: torch.Tensor | None  # (G, top_k) int64, or None when not kept

    @property
    def generated(self) -> list[int]:
        """The generated ids (ending with the end-of-turn token when the model reached it)."""
        return self.ids[self.prompt_len :]


def _left_pad(prompts: Sequence[Sequence[int]], pad_id: int) -> tuple[torch.Tensor, torch.Tensor]:
    import torch

    width = max(len(p) for p in prompts)
    ids = torch.full((len(prompts), width), pad_id, dtype=torch.long)
    mask = torch.zeros((len(prompts), width), dtype=torch.long)
    for row, prompt in enumerate(prompts):
        ids[row, width - len(prompt) :] = torch.tensor(list(prompt), dtype=torch.long)
        mask[row, width - len(prompt) :] = 1
    return ids, mask


@dataclass(frozen=True)
class _Decoding:
    max_new_tokens: int
    stop_ids: frozenset[int]
    pad_id: int
    keep: bool
    top_k: int


def _continue_batch(
    model: LlamaForCausalLM,
    prompts: Sequence[Sequence[int]],
    how: _Decoding,
) -> list[Continuation]:
    import torch
    from transformers import DynamicCache

    ids, mask = _left_pad(prompts, how.pad_id)
    positions = (mask.cumsum(-1) - 1).clamp(min=0)
    cache = DynamicCache()
    out = model.model(
        input_ids=ids,
        attention_mask=mask,
        position_ids=positions,
        past_key_values=cache,
        use_cache=True,
    )
    hidden = out.last_hidden_state[:, -1]
    rows = torch.arange(len(prompts))  # original row of each live batch entry
    last_pos = positions[:, -1]
    generated: list[list[int]] = [[] for _ in prompts]
    kept_hidden: list[list[torch.Tensor]] = [[] for _ in prompts]
    kept_top: list[list[torch.Tensor]] = [[] for _ in prompts]
    for step in range(how.max_new_tokens):
        logits = model.lm_head(hidden).float()
        chosen = logits.argmax(-1)
        top = torch.topk(logits, how.top_k, dim=-1).indices if how.keep else None
        alive = []
        for entry, row in enumerate(rows.tolist()):
            token = int(chosen[entry])
            generated[row].append(token)
            if top is not None:
                kept_hidden[row].append(hidden[entry].float().clone())
                kept_top[row].append(top[entry].clone())
            if token not in how.stop_ids:
                alive.append(entry)
        if not alive or step == how.max_new_tokens - 1:
            break
        if len(alive) < len(rows):
            index = torch.tensor(alive)
            cache.batch_select_indices(index)
            rows, mask, last_pos, chosen = rows[index], mask[index], last_pos[index], chosen[index]
        mask = torch.cat([mask, torch.ones((len(rows), 1), dtype=torch.long)], dim=1)
        last_pos = last_pos + 1
        out = model.model(
            input_ids=chosen[:, None],
            attention_mask=mask,
            position_ids=last_pos[:, None],
            past_key_values=cache,
            use_cache=True,
        )
        hidden = out.last_hidden_state[:, -1]
    return [
        Continuation(
            ids=list(prompt) + generated[row],
            prompt_len=len(prompt),
            hidden=torch.stack(kept_hidden[row]) if how.keep else None,
            top_ids=torch.stack(kept_top[row]) if how.keep else None,
        )
        for row, prompt in enumerate(prompts)
    ]


def length_batches(prompts: Sequence[Sequence[int]], batch_size: int) -> list[list[int]]:
    """Indices of ``prompts`` in batches of ``batch_size``, shortest prompts first (less
    padding). A sub-list of whole batches, in this order, is batched the same way again."""
    order = sorted(range(len(prompts)), key=lambda i: (len(prompts[i]), i))
    return [order[i : i + batch_size] for i in range(0, len(order), batch_size)]


def continue_prompts(
    model: LlamaForCausalLM,
    prompts: Sequence[Sequence[int]],
    *,
    max_new_tokens: int,
    stop_ids: Sequence[int],
    pad_id: int,
    batch_size: int,
    keep_hidden: bool = True,
    top_k: int = 8,
    on_batch: BatchCallback | None = None,
) -> list[Continuation]:
    """``model``'s greedy continuation of every prompt (token id lists), each up to
    ``max_new_tokens`` tokens and through the first of ``stop_ids``; with ``keep_hidden``, the
    final hidden state and top-k ids at every position that chose a token.

    Prompts are batched as :func:`length_batches` says and returned in the order given. A
    batch's result depends on nothing but its prompts (and the torch thread count), so the
    batches can be shared out between processes."""
    import torch

    if max_new_tokens < 1 or batch_size < 1:
        raise ValueError("max_new_tokens and batch_size must be positive")
    how = _Decoding(
        max_new_tokens=max_new_tokens,
        stop_ids=frozenset(stop_ids),
        pad_id=pad_id,
        keep=keep_hidden,
        top_k=top_k,
    )
    results: list[Continuation | None] = [None] * len(prompts)
    batches = length_batches(prompts, batch_size)
    model.eval()
    with torch.inference_mode():
        for done, batch in enumerate(batches, start=1):
            outs = _continue_batch(model, [prompts[i] for i in batch], how)
            for index, continuation in zip(batch, outs, strict=True):
                results[index] = continuation
            if on_batch is not None:
                on_batch(done, len(batches))
    return [c for c in results if c is not None]
