"""Streaming detokenization: deltas add up to the full decode; stop strings cut exactly."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from pathlib import Path

import pytest
from runtime_support import pipeline

from fleetgui.generation_config import GenerationConfig
from fleetgui.runtime.tokenizer import IncrementalText, Tokenizer, tokenizer_dir_of

TEXTS = (
    "def add(a, b):\n    return a + b\n\n\nprint(add(1, 2))",
    "Grüße aus Köln — naïve café, 東京タワー, emoji 🎉🚀 done.",
    "    indented\tlines\n\n  and  double  spaces  ",
)


@pytest.fixture(scope="module")
def tokenizer(tiny_export: Callable[..., Path]) -> Tokenizer:
    return Tokenizer(tokenizer_dir_of(tiny_export(2)))


def _stream(
    tokenizer: Tokenizer, ids: list[int], stops: tuple[str, ...] = ()
) -> tuple[str, list[str]]:
    text = IncrementalText(tokenizer, stops)
    deltas = []
    for end in range(1, len(ids) + 1):
        deltas.append(text.update(ids[:end]))
        if text.stopped:
            break
    deltas.append(text.flush(ids))
    return "".join(deltas), deltas


@pytest.mark.parametrize("source", TEXTS)
def test_deltas_add_up_to_the_full_decode(tokenizer: Tokenizer, source: str) -> None:
    ids = tokenizer.encode(source)
    joined, deltas = _stream(tokenizer, ids)
    assert joined == tokenizer.decode(ids)
    assert len([d for d in deltas if d]) > 3  # it really streamed
    assert all("\ufffd" not in d for d in deltas)  # no half characters


@pytest.mark.parametrize("step", [1, 2, 3, 5])
def test_the_text_is_the_same_however_the_tokens_come(tokenizer: Tokenizer, step: int) -> None:
    """A speculative round delivers several tokens at once, a plain step one: the text must not
    depend on it, also when the last tokens end in an incomplete UTF-8 character (byte tokens a
    small model emits), which only the end may write out as it is."""
    emoji = tokenizer.encode("emoji 🎉🚀 done 🎉")
    ids = emoji[:-1]  # the last character cut in the middle of its bytes: "\ufffd" at the end
    text = IncrementalText(tokenizer)
    for end in range(step, len(ids) + step, step):
        text.update(ids[:end])
    text.flush(ids)
    assert text.text == tokenizer.decode(ids)
    assert text.text.endswith("\ufffd") or tokenizer.decode(emoji).endswith(text.text[-1:])


@pytest.mark.parametrize(
    ("source", "stop"),
    [
        (TEXTS[0], "\n\n\n"),
        (TEXTS[0], "add(1"),
        (TEXTS[1], "🚀"),
        (TEXTS[1], "Köln —"),
        (TEXTS[2], "zzz"),
    ],
)
def test_stop_strings_cut_before_the_stop_and_never_leak_part_of_it(
    tokenizer: Tokenizer, source: str, stop: str
) -> None:
    ids = tokenizer.encode(source)
    full = tokenizer.decode(ids)
    joined, deltas = _stream(tokenizer, ids, (stop, "never-there"))
    expected = full[: full.find(stop)] if stop in full else full
    assert joined == expected
    emitted = ""
    for delta in deltas:
        emitted += delta
        assert stop not in emitted
        assert expected.startswith(emitted)


def test_pipeline_stops_at_a_stop_string(tiny_export: Callable[..., Path]) -> None:
    exported = tiny_export(2)

    async def main() -> None:
        pipe = pipeline(exported)
        try:
            free = await pipe.complete("import os", GenerationConfig(max_new_tokens=30))
            stop = free.text[len(free.text) // 2 : len(free.text) // 2 + 3]
            assert stop.strip(), "the tiny model's text should have something to stop at"
            options = GenerationConfig(max_new_tokens=30, stop=(stop,))
            pieces = []
            result = None
            async for item in pipe.stream("import os", options):
                if hasattr(item, "finish_reason"):
                    result = item
                else:
                    pieces.append(item.text)
            assert result is not None and result.finish_reason == "stop"
            assert result.text == free.text[: free.text.find(stop)] == "".join(pieces)
        finally:
            await pipe.close()

    asyncio.run(main())


def test_fast_decoder_is_used_and_matches_the_openvino_detokenizer(tokenizer: Tokenizer) -> None:
    """Wherever the bytes are valid UTF-8 the two decoders agree (on invalid bytes both show
    U+FFFD, not always the same number of them)."""
    import numpy as np

    assert tokenizer._fast is not None  # tokenizers is installed and agreed on the check sample
    rng = np.random.default_rng(0)
    checked = 0
    for text in TEXTS:
        ids = tokenizer.encode(text)
        assert tokenizer.decode(ids) == tokenizer._ov_decode(ids) == text
        for _ in range(30):
            start = int(rng.integers(0, len(ids) - 1))
            piece = ids[start : start + int(rng.integers(1, 12))]
            reference = tokenizer._ov_decode(piece)
            if "\ufffd" not in reference:
                assert tokenizer.decode(piece) == reference
                checked += 1
    assert checked > 40


def test_fast_encoder_is_used_and_gives_the_openvino_tokenizers_ids(tokenizer: Tokenizer) -> None:
    from fleetgui.runtime.tokenizer import _fast_encoder

    assert tokenizer._fast_encode is not None
    for text in (*TEXTS, "", "  two spaces", "tab\tand\nnewline", "ünïcödé 東京 🎉"):
        assert tokenizer.encode(text) == tokenizer._ov_encode(text), text

    def different(text: str) -> list[int]:  # a tokenizer HF does not reproduce
        return [1, *tokenizer._ov_encode(text)]

    assert _fast_encoder(tokenizer._fast, different) is None
