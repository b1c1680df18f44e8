"""Grammar engines for JSON-schema constrained decoding on this CPU: llguidance, outlines-core
and xgrammar with SmolLM2-135M-Instruct's tokenizer (vocab 49,152, end of turn id 2), on a
flat schema and a nested agent-style (tool call) one. For each engine: the tokenizer setup
(once), the schema's compile (median of 5, each fresh: xgrammar's cache is off), and a walk
along a valid answer's tokens: the mask of allowed tokens before each token (and before the
end of turn), checked to allow it, then the token consumed. Figures per step: the median over
the 5 walks; the total: the median walk (masks and consumes). Pinned to core 0, one thread.

outlines-core and xgrammar are imported from ``--libs`` (``outlines/``, ``xgrammar/``: wheels
installed there with ``pip install --no-deps --target``); an engine that does not import is
skipped with a note. outlines-core's vocabulary is built from tokenizer.json (no hub here).
Defaults kept: llguidance and xgrammar allow any JSON whitespace, outlines-core one optional
space (``[ ]?``) and no integer minimum / maximum; the answers pass all three.

Run: ``.venv/bin/python benchmarks/bench_grammar.py [--spacing compact]``
"""

from __future__ import annotations

import argparse
import importlib
import json
import logging
import os
import statistics
import sys
import time
from collections.abc import Callable
from importlib.metadata import version
from pathlib import Path
from typing import Any

import numpy as np
from common import ROOT, print_figures

log = logging.getLogger("benchmarks")

TOKENIZER = ROOT / "shards_cache/demo-smollm2-2stages-int8/tokenizer/tokenizer.json"
EOS = 2
REPEATS = 5
Matcher = tuple[Callable[[], np.ndarray], Callable[[int], bool]]  # (fill the mask, consume)


def obj(**properties: Any) -> dict[str, Any]:
    """An object schema with every property required (engines keep this order)."""
    return {"type": "object", "properties": properties, "required": list(properties)}


STR, STR24 = {"type": "string"}, {"type": "string", "maxLength": 24}
FLAT = obj(city=STR24, country=STR24, river={"enum": ["Seine", "Thames", "Rhine", "none"]},
           is_capital={"type": "boolean"}) | {"additionalProperties": False}  # fmt: skip
FILTERS = {"type": "array", "maxItems": 5,
           "items": obj(field=STR, op={"enum": ["eq", "lt", "gt"]}, value=STR)}  # fmt: skip
INT_1_50 = {"type": "integer", "minimum": 1, "maximum": 50}
AGENT = obj(name=STR, arguments=obj(query=STR, max_results=INT_1_50, filters=FILTERS))
SCHEMAS: dict[str, tuple[dict[str, Any], dict[str, Any]]] = {
    "flat": (FLAT, {"city": "Paris", "country": "France", "river": "Seine", "is_capital": True}),
    "agent": (AGENT, {"name": "search", "arguments": {"query": "weather in Paris", "max_results": 5,
              "filters": [{"field": "date", "op": "eq", "value": "today"}]}}),
}  # fmt: skip


def llguidance_engine(text: str) -> Callable[[str], Matcher]:
    import llguidance
    import llguidance.numpy as lnp

    tokenizer = llguidance.LLTokenizer(text, eos_token=[EOS])

    def compile_schema(schema: str) -> Matcher:
        grammar = llguidance.LLMatcher.grammar_from_json_schema(schema)
        matcher = llguidance.LLMatcher(tokenizer, grammar)
        mask = lnp.allocate_token_bitmask(1, tokenizer.vocab_size)

        def fill() -> np.ndarray:
            lnp.fill_next_token_bitmask(matcher, mask, 0)
            return mask

        return fill, matcher.consume_token

    return compile_schema


def outlines_engine(text: str) -> Callable[[str], Matcher]:
    import outlines_core

    bs = [*range(33, 127), *range(161, 173), *range(174, 256)]  # GPT-2's bytes_to_unicode
    chars = bs + [256 + i for i in range(256 - len(bs))]
    bs += [b for b in range(256) if b not in bs]
    to_byte = {chr(c): b for b, c in zip(bs, chars, strict=True)}
    spec = json.loads(text)
    special = {t["id"] for t in spec["added_tokens"] if t["special"]}  # not JSON text; EOS apart
    tokens: dict[bytes, list[int]] = {}
    for piece, i in spec["model"]["vocab"].items():
        if i not in special:
            tokens.setdefault(bytes(to_byte[c] for c in piece), []).append(i)
    vocabulary = outlines_core.Vocabulary(EOS, tokens)
    words = (len(spec["model"]["vocab"]) + 31) // 32

    def compile_schema(schema: str) -> Matcher:
        regex = outlines_core.json_schema.build_regex_from_schema(schema)
        guide = outlines_core.Guide(outlines_core.Index(regex, vocabulary))
        mask = np.zeros((1, words), np.int32)

        def fill() -> np.ndarray:
            guide.write_mask_into(mask.ctypes.data, mask.size, 4)
            return mask

        def consume(t: int) -> bool:  # EOS: the guide has no step for it, only is_finished()
            if t == EOS:
                return guide.is_finished()
            return guide.advance(t, return_tokens=False) is None

        return fill, consume

    return compile_schema


def xgrammar_engine(text: str) -> Callable[[str], Matcher]:
    import xgrammar
    from transformers import PreTrainedTokenizerFast

    hf = PreTrainedTokenizerFast(tokenizer_file=str(TOKENIZER))
    info = xgrammar.TokenizerInfo.from_huggingface(hf, vocab_size=len(hf), stop_token_ids=[EOS])
    compiler = xgrammar.GrammarCompiler(info, max_threads=1, cache_enabled=False)

    def compile_schema(schema: str) -> Matcher:
        matcher = xgrammar.GrammarMatcher(compiler.compile_json_schema(schema))
        mask = xgrammar.allocate_token_bitmask(1, info.vocab_size)

        def fill() -> np.ndarray:
            matcher.fill_next_token_bitmask(mask)
            return mask.numpy()

        return fill, matcher.accept_token

    return compile_schema


ENGINES = {"llguidance": llguidance_engine, "outlines-core": outlines_engine,
           "xgrammar": xgrammar_engine}  # fmt: skip


def walk(matcher: Matcher, tokens: list[int]) -> tuple[list[float], float, str | None]:
    """Each step's mask time (s), the whole walk's time (s), and the first rejected token."""
    fill, consume = matcher
    steps, start = [], time.perf_counter()
    for i, t in enumerate([*tokens, EOS]):
        t0 = time.perf_counter()
        mask = fill()
        steps.append(time.perf_counter() - t0)
        try:
            ok = bool((int(mask.flat[t // 32]) >> (t % 32)) & 1) and consume(t)
        except ValueError as error:  # outlines-core raises on a token with no step
            log.warning("%s", error)
            ok = False
        if not ok:
            return steps, time.perf_counter() - start, f"token {i} (id {t})"
    return steps, time.perf_counter() - start, None


def run(name: str, text: str, answers: dict[str, list[int]]) -> dict[str, Any]:
    start = time.perf_counter()
    importlib.import_module(name.replace("-", "_"))  # xgrammar's brings torch and transformers
    setup = time.perf_counter()
    compile_schema = ENGINES[name](text)
    out: dict[str, Any] = {"import_s": setup - start, "setup_s": time.perf_counter() - setup}
    out["version"] = version(name)
    for key, (schema, _) in SCHEMAS.items():
        compiles, walks = [], []
        for _ in range(REPEATS):
            t0 = time.perf_counter()
            matcher = compile_schema(json.dumps(schema))
            compiles.append(time.perf_counter() - t0)
            walks.append(walk(matcher, answers[key]))
        steps = [statistics.median(s) * 1e6 for s in zip(*(w[0] for w in walks), strict=False)]
        if rejected := walks[0][2]:
            log.warning("%s rejected %s's %s: %s", name, key, rejected, answers[key])
        total = statistics.median(w[1] for w in walks)
        out[key] = {"compile_s": statistics.median(compiles), "steps_us": steps,
                    "total_s": total, "rejected": rejected}  # fmt: skip
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--libs", type=Path, default=Path("/tmp/grammar-libs"))
    parser.add_argument("--spacing", choices=("spaced", "compact"), default="spaced")
    args = parser.parse_args()
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    log.setLevel(logging.INFO)
    os.sched_setaffinity(0, {0})
    sys.path += [str(args.libs / "outlines"), str(args.libs / "xgrammar")]
    from tokenizers import Tokenizer

    text = TOKENIZER.read_text()
    tokenizer, separators = Tokenizer.from_str(text), (", ", ": ")
    if args.spacing == "compact":
        separators = (",", ":")
    answers = {key: tokenizer.encode(json.dumps(a, separators=separators), add_special_tokens=False)
               .ids for key, (_, a) in SCHEMAS.items()}  # fmt: skip
    rows, out = [], {"answer_tokens": answers}
    for name in ENGINES:
        try:
            out[name] = result = run(name, text, answers)
        except (ImportError, OSError) as error:
            log.warning("%s skipped: it does not import (%s)", name, error)
            continue
        setup = f"{result['setup_s']:.3f} s (import {result['import_s']:.2f} s)"
        rows.append((f"{name} {result['version']}: tokenizer setup", setup))
        for key in SCHEMAS:
            r, n = result[key], len(answers[key]) + 1
            steps = f"{statistics.median(r['steps_us']):.0f} / {max(r['steps_us']):.0f} us"
            figures = f"compile {r['compile_s'] * 1e3:.1f} ms, mask median / max {steps}, "
            figures += f"{len(r['steps_us'])} of {n} steps {r['total_s'] * 1e3:.2f} ms"
            rows.append((f"  {key}", figures + f", REJECTED {r['rejected']}" * bool(r["rejected"])))
    print_figures(f"Grammar engines, {args.spacing} JSON answers, core 0", rows, out)


if __name__ == "__main__":
    main()
