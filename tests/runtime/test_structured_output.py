"""Structured output on the real SmolLM2 (2 fp32 stages): an answer constrained to a JSON schema
is valid JSON of that schema, and, greedy, token for token what the unsplit model gives when
each step's argmax is taken among the tokens the grammar allows; in PP, PP+SD with n-gram
drafts and with a draft model, and with two constrained streams interleaved (PP+MB)."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import jsonschema
import numpy as np
import pytest

import fleetgui
from fleetgui.generation_config import GenerationConfig
from fleetgui.runtime.constraint import GrammarEngine, grammar_of_schema
from fleetgui.runtime.generation import GenerationError, GenerationResult
from fleetgui.runtime.tokenizer import Tokenizer, tokenizer_dir_of

pytestmark = pytest.mark.slow

PERSON = {
    "type": "object",
    "properties": {
        "name": {"type": "string"},
        "age": {"type": "integer"},
        "languages": {"type": "array", "items": {"type": "string"}, "maxItems": 3},
    },
    "required": ["name", "age", "languages"],
    "additionalProperties": False,
}
WEATHER = {
    "type": "object",
    "properties": {
        "city": {"type": "string"},
        "celsius": {"type": "number"},
        "sky": {"enum": ["clear", "cloudy", "rain"]},
    },
    "required": ["city", "celsius", "sky"],
}
ASK_PERSON = [{"role": "user", "content": "Describe Ada Lovelace as JSON: name, age, languages."}]
ASK_WEATHER = [{"role": "user", "content": "What is the weather in Paris today? Answer in JSON."}]
N_TOKENS = 60
Reference = Callable[[str, dict[str, Any]], list[int]]


@pytest.fixture(scope="module")
def target(smollm2_fp32_exports: dict[int, Path]) -> Path:
    return smollm2_fp32_exports[2]


@pytest.fixture(scope="module")
def int8_draft(smollm2_gguf: Path, root: Path) -> Path:
    """SmolLM2 whole in int8: a draft whose tokens sometimes differ from the fp32 target's."""
    from cli_support import run_cli

    folder = root / "draft-int8"
    done = run_cli(
        root / "home", "export", str(smollm2_gguf), "--out", str(folder), "--stages", "1",
        "--weights", "int8", "--no-verify",
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    return folder


@pytest.fixture(scope="module")
def reference(smollm2_gguf: Path, target: Path) -> Reference:
    """The unsplit model's (transformers, fp32) greedy answer under the grammar: each step the
    argmax among the tokens the grammar allows."""
    import torch
    from transformers import AutoModelForCausalLM

    from fleetgui.export.transformers_gguf import load_gguf_model

    model = load_gguf_model(AutoModelForCausalLM, smollm2_gguf, dtype=torch.float32)
    tokenizer = Tokenizer(tokenizer_dir_of(target))
    engine = GrammarEngine(tokenizer_dir_of(target), tokenizer.eos_token_ids)

    def answer(prompt: str, schema: dict[str, Any]) -> list[int]:
        constraint = engine.constraint(grammar_of_schema(schema))
        ids = torch.tensor([tokenizer.encode(prompt)])
        out: list[int] = []
        past = None
        with torch.no_grad():
            for _ in range(N_TOKENS):
                step = model(input_ids=ids, past_key_values=past, use_cache=True)
                past = step.past_key_values
                logits = step.logits[0, -1:].numpy()
                token = int(np.argmax(constraint.mask().apply(logits)[0]))
                if token in tokenizer.eos_token_ids:
                    break
                out.append(token)
                constraint.accept([token])
                if constraint.done:
                    break
                ids = torch.tensor([[token]])
        return out

    return answer


def run(
    target: Path, draft: str | Path | None, *asks: tuple[list[Any], GenerationConfig]
) -> list[GenerationResult]:
    """Each chat's result, all generated at once (interleaved) by one pipeline."""

    async def main() -> list[GenerationResult]:
        llm = await fleetgui.aopen(target, precision="f32", draft=draft, max_streams=4)
        try:
            prompts = [llm.chat_prompt(messages, config) for messages, config in asks]
            return list(await asyncio.gather(*(llm.agenerate_result(p, c) for p, c in prompts)))
        finally:
            await llm.aclose()

    return asyncio.run(main())


def config(schema: dict[str, Any], k: int | str = "off") -> GenerationConfig:
    return GenerationConfig(max_new_tokens=N_TOKENS, json_schema=schema, k=k)  # type: ignore[arg-type]


def check_answer(result: GenerationResult, schema: dict[str, Any], want: list[int]) -> None:
    assert result.token_ids == want, (result.text, result.token_ids, want)
    jsonschema.validate(json.loads(result.text), schema)
    assert result.finish_reason.value == "eos"  # the grammar closed the object


def test_pp_and_two_interleaved_streams_give_the_unsplit_models_constrained_answer(
    target: Path, reference: Reference
) -> None:
    (alone,) = run(target, None, (ASK_PERSON, config(PERSON)))
    prompt = alone.prompt
    check_answer(alone, PERSON, reference(prompt, PERSON))
    person, weather = run(
        target, None, (ASK_PERSON, config(PERSON)), (ASK_WEATHER, config(WEATHER))
    )
    check_answer(person, PERSON, alone.token_ids)
    check_answer(weather, WEATHER, reference(weather.prompt, WEATHER))


@pytest.mark.parametrize("drafter", ["ngram", "model"])
def test_speculative_rounds_check_every_draft_against_the_grammar(
    drafter: str, target: Path, request: pytest.FixtureRequest, reference: Reference
) -> None:
    draft = "ngram" if drafter == "ngram" else request.getfixturevalue("int8_draft")
    person, weather = run(
        target, draft, (ASK_PERSON, config(PERSON, 4)), (ASK_WEATHER, config(WEATHER, "auto"))
    )
    check_answer(person, PERSON, reference(person.prompt, PERSON))
    check_answer(weather, WEATHER, reference(weather.prompt, WEATHER))
    assert sum(person.ks) > 0  # it drafted


def test_a_schema_the_engine_cannot_use_is_refused_before_generating(target: Path) -> None:
    with pytest.raises(GenerationError, match="nonsense"):
        run(target, None, (ASK_PERSON, config({"type": "nonsense"})))
