"""The Python front door, ``fleetgui.open``: on this PC and on two real workers the same greedy
text as the runtime's own pipeline, streamed text equal to the whole answer, the stream limit
held inside, clear errors, the README's Python example run as written on a tiny export, and a
runtime pipeline opened elsewhere (the app's, ``serve``'s) wrapped with ``LLMPipeline.over``."""

from __future__ import annotations

import asyncio
import re
import threading
from collections.abc import Callable
from pathlib import Path

import pytest
from fleet_support import WorkerProcess

import fleetgui
from fleetgui.errors import FleetguiError
from fleetgui.generation_config import GenerationConfig
from fleetgui.runtime.loader import LocalPipelineConfig, load_local_pipeline
from fleetgui.runtime.ov_stage import StageConfig

ROOT = Path(__file__).resolve().parent.parent
PROMPT = "def add(a, b):\n    return"


def reference(export_dir: Path, n: int) -> str:
    """The runtime's greedy text at f32, the precision every run it is compared with asks for
    (``auto`` is bf16 on a CPU with AVX-512 bf16 or AMX, and would differ)."""

    async def main() -> str:
        config = LocalPipelineConfig(stage=StageConfig(precision="f32"))
        pipeline = load_local_pipeline(export_dir, config=config)
        try:
            return (await pipeline.complete(PROMPT, GenerationConfig(max_new_tokens=n))).text
        finally:
            await pipeline.close()

    return asyncio.run(main())


def test_open_generates_and_streams_the_runtimes_greedy_text(
    tiny_export: Callable[..., Path],
) -> None:
    export_dir = tiny_export(2)
    want = reference(export_dir, 24)
    with fleetgui.open(export_dir, precision="f32") as llm:
        assert llm.generate(PROMPT, max_new_tokens=24) == want
        assert "".join(llm.stream(PROMPT, max_new_tokens=24)) == want
        config = fleetgui.GenerationConfig(temperature=0.8, top_p=0.9, seed=7, max_new_tokens=16)
        assert llm.generate(PROMPT, config) == llm.generate(PROMPT, config)  # seeded: repeatable
        hello = [{"role": "user", "content": "hi"}]
        assert llm.chat(hello, max_new_tokens=4) == llm.chat(hello, max_new_tokens=4)
        stopped = llm.stream(PROMPT, max_new_tokens=24)
        next(stopped)
        stopped.close()  # leaving early frees the stream: the next answer is whole
        assert llm.generate(PROMPT, max_new_tokens=24) == want


def test_at_most_max_streams_generate_at_once(tiny_export: Callable[..., Path]) -> None:
    """Three threads ask at once; with max_streams=1 each reply's tokens come in one run, never
    interleaved with another's."""
    export_dir = tiny_export(2)
    from fleetgui.runtime.metrics import TokensEmitted

    emitted: list[int] = []
    # reuse off: each reply a stream of its own, told apart by its id
    with fleetgui.open(export_dir, max_streams=1, precision="f32", kv_reuse=False) as llm:
        llm._runtime.metrics.subscribe(
            lambda e: emitted.append(e.stream_id) if isinstance(e, TokensEmitted) else None
        )
        threads = [
            threading.Thread(target=llm.generate, args=(PROMPT,), kwargs={"max_new_tokens": 6})
            for _ in range(3)
        ]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(60)
        assert llm.max_streams == 1
    runs = [s for i, s in enumerate(emitted) if i == 0 or emitted[i - 1] != s]
    assert len(runs) == len(set(runs)) == 3, emitted  # one run of tokens per reply


def test_bad_arguments_get_clear_errors(tiny_export: Callable[..., Path], tmp_path: Path) -> None:
    export_dir = tiny_export(2)
    with pytest.raises(FleetguiError, match="max_streams must be at least 1"):
        fleetgui.open(export_dir, max_streams=0)
    with pytest.raises(FleetguiError, match="layout='copies' puts a copy on each worker"):
        fleetgui.open(export_dir, layout="copies")
    with fleetgui.open(export_dir, precision="f32") as llm:
        with pytest.raises(FleetguiError, match="not a GenerationConfig field"):
            llm.generate(PROMPT, max_tokens=4)
        with pytest.raises(FleetguiError, match="temperature"):
            llm.generate(PROMPT, temperature=-1.0)


def test_open_on_two_workers_gives_the_same_text(
    tiny_export: Callable[..., Path], live_workers: list[WorkerProcess], identity_dir: Path
) -> None:
    export_dir = tiny_export(2)
    want = reference(export_dir, 24)
    addresses = [w.address for w in live_workers[:2]]
    options = {"identity": identity_dir, "precision": "f32"}
    with fleetgui.open(export_dir, workers=addresses[:1], **options) as llm:
        assert llm.generate(PROMPT, max_new_tokens=24) == want
    with fleetgui.open(export_dir, workers=addresses, layout="copies", **options) as llm:
        assert llm.generate(PROMPT, max_new_tokens=24) == want


def test_the_readmes_python_example_runs(
    tiny_export: Callable[..., Path], capsys: pytest.CaptureFixture[str]
) -> None:
    export_dir = tiny_export(2)
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    match = re.search(r"<!-- python-example -->\s*```python\n(.+?)\n```", readme, re.S)
    assert match, "README has no Python example after <!-- python-example -->"
    code = match.group(1)
    assert len(code.splitlines()) <= 12 and '"shards/llama8b"' in code
    exec(compile(code.replace('"shards/llama8b"', repr(str(export_dir))), "README", "exec"), {})
    assert capsys.readouterr().out.strip()  # it printed the chat reply and the two answers


def test_a_runtime_pipeline_opened_elsewhere_behind_the_front_door(
    tiny_export: Callable[..., Path],
) -> None:
    """``LLMPipeline.over`` as the app and ``serve`` use it: the stream's deltas then its result,
    a chat's prompt and stop strings, the stream limit changed and held."""
    export_dir = tiny_export(2)
    from fleetgui.generation_config import GenerationConfig
    from fleetgui.llm_pipeline import LLMPipeline
    from fleetgui.modes import Mode
    from fleetgui.runtime.generation import GenerationResult, TokenDelta

    # a mode's answers: speculation off, or K as asked (a number or auto); None is off
    assert Mode.PP.draft_tokens(3) == "off" and Mode.PP_SD.draft_tokens("auto") == "auto"
    assert GenerationConfig(k="auto").speculative and not GenerationConfig(k=None).speculative
    with pytest.raises(ValueError, match="K must be between"):
        GenerationConfig(k=99).check()

    async def main() -> None:
        llm = LLMPipeline.over(load_local_pipeline(export_dir), max_streams=2)
        try:
            assert llm.max_streams == 2
            llm.max_streams = 1
            assert llm.runtime.streams.limit == 1
            config = GenerationConfig(max_new_tokens=12)
            items = [item async for item in llm.astream_result(PROMPT, config)]
            *deltas, result = items
            assert all(isinstance(d, TokenDelta) for d in deltas)
            assert isinstance(result, GenerationResult)
            assert "".join(d.text for d in deltas) == result.text
            assert result.text == await llm.agenerate(PROMPT, config)
            prompt, chat = llm.chat_prompt([{"role": "user", "content": "hi"}], config)
            assert prompt and set(llm.prompter.stop_strings) <= set(chat.stop)
            await llm.ahold()
            assert llm.held
            waiting = asyncio.create_task(llm.agenerate(PROMPT, config))
            async with asyncio.timeout(30):
                while llm.runtime.streams.waiting < 1:  # encoded, then waits for a slot
                    await asyncio.sleep(0.01)
            await asyncio.sleep(0.2)
            assert not waiting.done()
            llm.resume()
            assert await waiting == result.text
        finally:
            await llm.aclose()

    asyncio.run(main())
