"""GGUF files without a chat template (base builds) chat in their family's format: a Llama 3 and a
Qwen2 (ChatML) GGUF written at test time render their family's markers and stop at its
end-of-turn token; a GGUF of no known family keeps the plain transcript, which stops where the
model starts a new turn, and its note does not send a GGUF user to a tokenizer_config.json."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from gguf_support import write_llama_gguf
from runtime_support import export, pipeline

from fleetgui.export.chat_formats import FORMATS, PLAIN, detect_format
from fleetgui.generation_config import GenerationConfig
from fleetgui.runtime.chat_prompt import ChatPrompter
from fleetgui.runtime.chat_template import GGUF_NO_TEMPLATE_NOTE, no_template_note
from fleetgui.runtime.generation import FinishReason
from fleetgui.runtime.special_tokens import token_ids
from fleetgui.runtime.tokenizer import IncrementalText, Tokenizer, tokenizer_dir_of

CHAT = [
    {"role": "system", "content": "Be brief."},
    {"role": "user", "content": "What is the capital of France?"},
]
LLAMA3_TOKENS = ("<|start_header_id|>", "<|end_header_id|>", "<|eot_id|>")
CHATML_TOKENS = ("<|im_start|>", "<|im_end|>")
# family: (tiny model, GGUF architecture, chat tokens in its vocabulary, end-of-turn token,
#          what the rendered prompt must hold, how it must end)
FAMILIES: dict[str, tuple[str, str, tuple[str, ...], str, str, str]] = {
    "llama3": ("llama", "llama", LLAMA3_TOKENS, "<|eot_id|>",
               "<|start_header_id|>user<|end_header_id|>\n\nWhat is the capital of France?"
               "<|eot_id|>", "<|start_header_id|>assistant<|end_header_id|>\n\n"),
    "chatml": ("qwen2", "qwen2", CHATML_TOKENS, "<|im_end|>",
               "<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\nWhat is the capital "
               "of France?<|im_end|>\n", "<|im_start|>assistant\n"),
}  # fmt: skip


@pytest.fixture(scope="module")
def gguf_export(
    tiny_models: Callable[..., Path], tmp_path_factory: pytest.TempPathFactory
) -> Callable[[str], Path]:
    """``get(family)``: a one-stage export of a GGUF with no chat template ("plain": no chat
    tokens either), made once."""
    root = tmp_path_factory.mktemp("gguf_chat")
    made: dict[str, Path] = {}

    def get(family: str) -> Path:
        if family not in made:
            model, arch, tokens = (
                ("llama", "llama", ()) if family == PLAIN else FAMILIES[family][:3]
            )
            path = write_llama_gguf(
                tiny_models(model),
                root / f"{family}.gguf",
                architecture=arch,
                chat_template=None,
                chat_tokens=tokens,
            )
            made[family] = export(path, root / f"{family}-export", stages=1)
        return made[family]

    return get


def test_the_format_is_chosen_by_tokens_then_architecture() -> None:
    assert detect_format("llama", ["<s>", *LLAMA3_TOKENS]) is FORMATS["llama3"]
    assert detect_format("qwen2", CHATML_TOKENS) is FORMATS["chatml"]
    assert detect_format("llama", CHATML_TOKENS) is FORMATS["chatml"]  # tokens first
    assert detect_format("gemma3", ["<start_of_turn>", "<end_of_turn>"]) is FORMATS["gemma"]
    assert detect_format("gemma3", ["<bos>"]) is FORMATS["gemma"]
    assert detect_format("phi3", ["<|user|>", "<|end|>"]) is FORMATS["phi3"]
    assert detect_format("llama", ["<s>", "[INST]", "[/INST]"]) is FORMATS["mistral"]
    assert detect_format("llama", ["<s>", "</s>"], sentencepiece=True) is FORMATS["llama2"]
    assert detect_format("llama", ["<|bos|>", "<|eos|>"]) is None  # unknown: the transcript


@pytest.mark.slow  # two tiny GGUF exports: about 15 s each
@pytest.mark.parametrize("family", list(FAMILIES))
def test_a_gguf_without_a_template_chats_in_its_familys_format(
    gguf_export: Callable[[str], Path], family: str
) -> None:
    export_dir = gguf_export(family)
    *_, end_token, body, generation_prompt = FAMILIES[family]
    tokenizer = Tokenizer(tokenizer_dir_of(export_dir))
    prompter = ChatPrompter.for_tokenizer(tokenizer)
    assert not prompter.is_fallback and prompter.template.chat_format == family
    assert no_template_note(prompter.template) == ""
    text = prompter.text(CHAT)
    assert body in text and text.endswith(generation_prompt)
    end_id = token_ids(tokenizer.folder)[end_token]
    assert tokenizer.encode(f"Hi{end_token}")[-1] == end_id  # one control token, not spelled
    assert end_id in tokenizer.eos_token_ids  # so a reply ends at it

    async def run() -> Any:
        pipe = pipeline(export_dir)
        assert end_id in pipe.tokenizer.eos_token_ids  # the pipeline's stop ids
        try:
            return await pipe.complete(text, GenerationConfig(max_new_tokens=4))
        finally:
            await pipe.close()

    result = asyncio.run(run())
    assert result.token_ids and result.finish_reason in (FinishReason.EOS, FinishReason.MAX_TOKENS)
    assert result.text == tokenizer.decode(result.token_ids)


@pytest.mark.slow  # a tiny GGUF export: about 15 s
def test_a_gguf_of_no_known_family_chats_as_a_transcript_that_stops_at_its_turn_markers(
    gguf_export: Callable[[str], Path],
) -> None:
    tokenizer = Tokenizer(tokenizer_dir_of(gguf_export(PLAIN)))
    prompter = ChatPrompter.for_tokenizer(tokenizer)
    assert prompter.is_fallback and prompter.template.chat_format == PLAIN
    note = no_template_note(prompter.template)
    assert note == GGUF_NO_TEMPLATE_NOTE and "tokenizer_config.json" not in note
    assert prompter.text(CHAT[1:]) == "User: What is the capital of France?\nAssistant:"
    for marker in ("User:", "Assistant:"):  # the user's next turn, or another of its own
        ids = tokenizer.encode(f" Paris is.\n{marker} And the capital of Spain?")
        text = IncrementalText(tokenizer, stop_strings=prompter.stop_strings)
        for end in range(1, len(ids) + 1):
            text.update(ids[:end])
        text.flush(ids)
        full = tokenizer.decode(ids)
        assert text.stopped and text.text == full[: full.index(f"\n{marker}")], marker
        assert text.text.endswith(" Paris is.")
