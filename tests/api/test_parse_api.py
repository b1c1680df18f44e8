"""``client.chat.completions.parse(..., response_format=PydanticModel)``, as agents call it,
against ``fleetgui serve`` on the demo's real SmolLM2 (its second stage on a real worker): 20
prompts over 4 schemas (nested objects, arrays, enums, numbers with bounds), greedy and
sampled, in PP, PP+SD with n-gram drafts and PP+MB; every answer parses into its model."""

from __future__ import annotations

import enum
from collections.abc import Iterator
from pathlib import Path
from typing import Annotated

import pytest
from fleet_support import WorkerProcess, running_workers
from serve_support import KEY, fleet_args, serving

openai = pytest.importorskip("openai")
pydantic = pytest.importorskip("pydantic")
from pydantic import BaseModel, Field  # noqa: E402

pytestmark = pytest.mark.slow

# Bounded fields, as the usage guide advises: a tiny model may otherwise write forever.
Name = Field(max_length=30)


class City(BaseModel):
    name: str = Name
    country: str = Name
    population_millions: float = Field(ge=0, le=100)


class Address(BaseModel):
    street: str = Name
    town: str = Name


class Person(BaseModel):
    name: str = Name
    age: int = Field(ge=0, le=120)
    address: Address


class Recipe(BaseModel):
    title: str = Name
    ingredients: list[Annotated[str, Field(max_length=40)]] = Field(min_length=1, max_length=4)
    minutes: int = Field(ge=1, le=600)


class Verdict(enum.StrEnum):
    GOOD = "good"
    MIXED = "mixed"
    BAD = "bad"


class Review(BaseModel):
    product: str = Name
    verdict: Verdict
    stars: int = Field(ge=1, le=5)


PROMPTS: list[tuple[type[BaseModel], str]] = [
    (City, "Describe Paris."),
    (City, "Describe Tokyo."),
    (City, "Describe a small town in Norway."),
    (City, "Describe the capital of Canada."),
    (City, "Describe New York."),
    (Person, "Invent a baker who lives in Lyon."),
    (Person, "Describe a retired teacher."),
    (Person, "Invent a young pilot."),
    (Person, "Describe your neighbour."),
    (Person, "Invent a famous painter."),
    (Recipe, "Give me a pancake recipe."),
    (Recipe, "How do I make tomato soup?"),
    (Recipe, "A quick salad, please."),
    (Recipe, "How to bake bread?"),
    (Recipe, "A recipe for lemonade."),
    (Review, "Review a pair of cheap headphones."),
    (Review, "Review the best phone you know."),
    (Review, "Review a bicycle that broke after a week."),
    (Review, "Review a coffee machine."),
    (Review, "Review a rainy holiday."),
]


@pytest.fixture(scope="module")
def worker(root: Path, authorized_keys: Path) -> Iterator[list[WorkerProcess]]:
    with running_workers(root / "parse-workers", ["p1"], authorized_keys) as workers:
        yield workers


@pytest.mark.parametrize("mode", ["pp", "pp+sd", "pp+mb"])
def test_parse_gives_a_valid_object_for_every_prompt(
    mode: str,
    smollm2_demo_export: Path,
    worker: list[WorkerProcess],
    identity_dir: Path,
    root: Path,
) -> None:
    args = [*fleet_args(worker, identity_dir), "--mode", mode, "--api-key", KEY]
    args[args.index("--precision") + 1] = "auto"  # validity, not exactness: the fast default
    if mode == "pp+sd":
        args += ["--draft", "ngram"]
    with serving(root / f"parse-{mode.replace('+', '-')}", smollm2_demo_export, *args) as served:
        client = served.client(timeout=300)
        for seed, (model, prompt) in enumerate(PROMPTS):
            for sampling in ({"temperature": 0}, {"temperature": 0.8, "seed": seed}):
                reply = client.chat.completions.parse(
                    model=served.name,
                    messages=[{"role": "user", "content": prompt}],
                    response_format=model,
                    max_tokens=400,
                    **sampling,
                )
                parsed = reply.choices[0].message.parsed
                assert isinstance(parsed, model), (mode, prompt, sampling, reply)
