"""SmolLM2's answers to chat questions, generated in this process and a helper process at once.

Answering is most of a draft build's time, and one process uses one core well but two poorly:
torch's two threads wait for each other at every operation whenever the other core is busy (a
48 x 576 by 576 x 1536 matmul took 16 ms on two threads against 1.2 ms on one while other
programs ran). So the target's answers come from two one-thread processes, each with its own
copy of the target, taking alternate batches: the :class:`AnswerHelper` and the caller. A
batch's answers depend only on its prompts, so the result is the same however the batches are
shared out.
"""

from __future__ import annotations

import contextlib
import logging
import multiprocessing
from collections.abc import Sequence
from dataclasses import dataclass
from multiprocessing.connection import Connection
from pathlib import Path
from types import TracebackType
from typing import TYPE_CHECKING, Any

from fleetgui.errors import FleetguiError
from fleetgui.training.continuations import Continuation, continue_prompts
from fleetgui.training.draft_distiller.chat_prompts import Question

if TYPE_CHECKING:
    from transformers import LlamaForCausalLM, PreTrainedTokenizerBase

log = logging.getLogger(__name__)

_CLOSE_TIMEOUT_S = 10.0


class AnswerHelperError(FleetguiError):
    """The helper process failed or died while answering."""


def load_target(gguf: Path) -> tuple[LlamaForCausalLM, PreTrainedTokenizerBase, Path]:
    """The target in torch (fp32, dequantized from the GGUF), its tokenizer and the GGUF's
    HF view folder (config, tokenizer and chat template built from the file's metadata)."""
    import torch

    from fleetgui.export.sources import resolve_model
    from fleetgui.export.transformers_gguf import load_gguf_model
    from fleetgui.torch_env import hide_torchvision

    hide_torchvision()
    from transformers import AutoTokenizer, LlamaForCausalLM

    view = resolve_model(gguf)
    # the GGUF tokenizer transformers builds is wrong for this file; the view's is checked
    tokenizer = AutoTokenizer.from_pretrained(str(view))
    model = load_gguf_model(LlamaForCausalLM, gguf, dtype=torch.float32)
    return model, tokenizer, view


def render(tokenizer: PreTrainedTokenizerBase, question: Question) -> list[int]:
    """The question as one user message under the model's chat template, with the
    assistant's generation prompt: what the demo's chat sends."""
    text = tokenizer.apply_chat_template(
        [{"role": "user", "content": question.text}], tokenize=False, add_generation_prompt=True
    )
    return [int(i) for i in tokenizer(str(text), add_special_tokens=False)["input_ids"]]


def stop_ids(model: LlamaForCausalLM) -> list[int]:
    """The model's end-of-turn ids (``generation_config.eos_token_id``)."""
    eos = model.generation_config.eos_token_id
    if eos is None:
        eos = model.config.eos_token_id
    return [int(e) for e in (eos if isinstance(eos, list) else [eos])]


def pad_id(model: LlamaForCausalLM) -> int:
    pad = model.config.pad_token_id
    return int(pad) if pad is not None else stop_ids(model)[0]


@dataclass(frozen=True)
class AnswerJob:
    """Prompts (token ids) to answer greedily, as :func:`continue_prompts` takes them."""

    prompts: list[list[int]]
    max_new_tokens: int
    batch_size: int
    keep_hidden: bool


def answer(model: LlamaForCausalLM, job: AnswerJob) -> list[Continuation]:
    """``model``'s answers to ``job``'s prompts."""
    return continue_prompts(
        model,
        job.prompts,
        max_new_tokens=job.max_new_tokens,
        stop_ids=stop_ids(model),
        pad_id=pad_id(model),
        batch_size=job.batch_size,
        keep_hidden=job.keep_hidden,
    )


@dataclass(frozen=True)
class _Failure:
    message: str


def _serve(gguf: str, conn: Connection) -> None:
    """The helper process: load the target once, then answer jobs until told to stop."""
    from fleetgui.training.train import deterministic_torch

    with deterministic_torch(1):
        try:
            model, _, _ = load_target(Path(gguf))
        except Exception as exc:  # reported to the parent, which raises it
            conn.send(_Failure(f"cannot load {gguf}: {exc}"))
            return
        while (job := conn.recv()) is not None:
            try:
                conn.send(answer(model, job))
            except Exception as exc:
                conn.send(_Failure(f"{type(exc).__name__}: {exc}"))


class AnswerHelper:
    """A second process holding its own copy of the target, answering :class:`AnswerJob`s in
    the order submitted; a context manager that stops it (killing it if it hangs)."""

    def __init__(self, gguf: Path) -> None:
        context = multiprocessing.get_context("spawn")  # no fork of a process with torch threads
        self._conn, child = context.Pipe()
        self._process = context.Process(
            target=_serve, args=(str(gguf), child), name="draft-answers", daemon=True
        )
        self._process.start()
        child.close()
        self._pending = 0

    def submit(self, job: AnswerJob) -> None:
        self._conn.send(job)
        self._pending += 1

    def result(self) -> list[Continuation]:
        """The answers to the oldest job not yet collected."""
        if not self._pending:
            raise RuntimeError("no job was submitted")
        try:
            reply: Any = self._conn.recv()
        except EOFError as exc:
            raise AnswerHelperError(
                f"the answer helper process died (exit code {self._process.exitcode})"
            ) from exc
        self._pending -= 1
        if isinstance(reply, _Failure):
            raise AnswerHelperError(f"the answer helper process failed: {reply.message}")
        return list(reply)

    def close(self, abort: bool = False) -> None:
        """Stop the helper: let it finish when it is idle, else (or on ``abort``) kill it."""
        if self._process.is_alive() and not abort and not self._pending:
            with contextlib.suppress(OSError):  # the helper is gone already
                self._conn.send(None)
            self._process.join(_CLOSE_TIMEOUT_S)
        if self._process.is_alive():
            self._process.kill()
            self._process.join()
        self._conn.close()

    def __enter__(self) -> AnswerHelper:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close(abort=exc is not None)


def split_batches(prompts: Sequence[Sequence[int]], batch_size: int) -> tuple[list[int], list[int]]:
    """Indices of ``prompts`` for the caller and for the helper: alternate batches of
    :func:`~fleetgui.training.continuations.length_batches`, each share in its batch order."""
    from fleetgui.training.continuations import length_batches

    batches = length_batches(prompts, batch_size)
    mine = [i for batch in batches[0::2] for i in batch]
    theirs = [i for batch in batches[1::2] for i in batch]
    return mine, theirs
