"""``response_format`` through ``fleetgui serve`` with the official ``openai`` client: the real
SmolLM2 (2 fp32 stages, the last on a real worker process, so every step's token mask crosses
the wire and the worker applies it) answers with JSON valid against the schema asked for, the
same answer as the model opened in this process; in PP+MB, and in PP+SD with n-gram drafts. A
schema the grammar engine cannot use is a 400 naming ``response_format``."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import jsonschema
import pytest
from fleet_support import WorkerProcess, running_workers
from serve_support import KEY, Served, fleet_args, serving, streamed_text

import fleetgui
from fleetgui.generation_config import GenerationConfig

openai = pytest.importorskip("openai")

pytestmark = pytest.mark.slow

# bounded fields: a tiny model may otherwise write digits until the token limit
CITY = {
    "type": "object",
    "properties": {
        "city": {"type": "string", "maxLength": 24},
        "country": {"type": "string", "maxLength": 24},
        "river": {"enum": ["Seine", "Thames", "Rhine", "none"]},
        "is_capital": {"type": "boolean"},
    },
    "required": ["city", "country", "river", "is_capital"],
    "additionalProperties": False,
}
CAPITAL = {
    "type": "object",
    "properties": {
        "capital": {"type": "string", "maxLength": 24},
        "on_a_river": {"type": "boolean"},
    },
    "required": ["capital", "on_a_river"],
    "additionalProperties": False,
}
MESSAGES = [{"role": "user", "content": "Give me facts about Paris as JSON."}]
SCIENTIST = [
    {"role": "user", "content": "Give the name and age of a famous scientist as a JSON object."}
]
N_TOKENS = 60


@pytest.fixture(scope="module")
def target(smollm2_fp32_exports: dict[int, Path]) -> Path:
    return smollm2_fp32_exports[2]


@pytest.fixture(scope="module")
def worker(root: Path, authorized_keys: Path) -> Iterator[list[WorkerProcess]]:
    with running_workers(root / "json-workers", ["j1"], authorized_keys) as workers:
        yield workers


@pytest.fixture(scope="module")
def in_process(target: Path) -> str:
    """The constrained answer of the model opened in this process (both stages here)."""
    with fleetgui.open(target, precision="f32") as llm:
        config = GenerationConfig(max_new_tokens=N_TOKENS, json_schema=CITY)
        return llm.chat(MESSAGES, config)


def ask(served: Served, messages: list[dict[str, str]] = MESSAGES, **extra: Any) -> Any:
    return served.client().chat.completions.create(
        model=served.name, messages=messages, temperature=0, **{"max_tokens": N_TOKENS, **extra}
    )


def schema_format(schema: dict[str, Any]) -> dict[str, Any]:
    return {
        "type": "json_schema",
        "json_schema": {"name": "facts", "schema": schema, "strict": True},
    }


@pytest.mark.parametrize("mode", ["pp+mb", "pp+sd"])
def test_the_answer_follows_the_schema_on_the_fleet_as_in_process(
    mode: str,
    target: Path,
    worker: list[WorkerProcess],
    identity_dir: Path,
    root: Path,
    in_process: str,
) -> None:
    jsonschema.validate(json.loads(in_process), CITY)
    args = [*fleet_args(worker, identity_dir), "--mode", mode, "--api-key", KEY]
    if mode == "pp+sd":
        args += ["--draft", "ngram", "--k", "3"]
    with serving(root / f"json-{mode}", target, *args) as served:
        whole = ask(served, response_format=schema_format(CITY))
        text, finish, _ = streamed_text(
            ask(served, response_format=schema_format(CITY), stream=True)
        )
        any_object = ask(served, SCIENTIST, max_tokens=150, response_format={"type": "json_object"})
        completion = served.client().completions.create(
            model=served.name,
            prompt="The capital of France, in JSON:",
            max_tokens=N_TOKENS,
            temperature=0,
            extra_body={"response_format": schema_format(CAPITAL)},
        )
        with pytest.raises(openai.BadRequestError) as refused:
            ask(served, response_format=schema_format({"type": "nonsense"}))
        with pytest.raises(openai.BadRequestError) as unknown:
            ask(served, response_format={"type": "xml"})
    assert whole.choices[0].message.content == text == in_process
    assert whole.choices[0].finish_reason == finish == "stop"
    assert isinstance(json.loads(any_object.choices[0].message.content), dict)
    assert any_object.choices[0].finish_reason == "stop"
    jsonschema.validate(json.loads(completion.choices[0].text), CAPITAL)
    assert completion.choices[0].finish_reason == "stop"
    assert refused.value.status_code == 400 and "nonsense" in refused.value.message
    assert refused.value.body["param"] == "response_format"
    assert unknown.value.body["param"] == "response_format.type"
