"""What agents and chat UIs cost through ``fleetgui serve``, side by side in one run.

The demo's SmolLM2-135M-Instruct (int8, 2 stages) on this PC's stage 0 (``fleetgui serve``
pinned to core 0, one OpenVINO thread) and one worker process (stage 1, core 1, one thread);
the ``openai`` client, streamed.

- constrained (``--mode``, PP by default): the same prompts answered with a JSON schema
  (``response_format``) and without; decode tokens/s of each answer (tokens after the first
  over the time after the first), the two kinds alternating so that the machine's noise falls
  on both.
- waiting (PP+SD with n-gram drafts, as the issue's user ran it): Open WebUI's request shape
  (``tests/open_webui_requests.py``): a new chat's streamed message with its 36 built-in tools
  and, beside it, its title request; then its background requests (follow-ups, then tags; not
  streamed, no ``max_tokens``, ``--context 2048``) and a request of that shape made to run
  long (400 numbers by a schema), and while they generate a second user's
  streamed message: that user's time to first token, against a message on the idle server
  (both after the first chat, whose tool prompt they share), with the default
  ``--max-streams`` and with ``--max-streams 1`` (one request at a time, as before).

Run: ``.venv/bin/python benchmarks/bench_agent_api.py [--rounds 2] [--mode pp] [--no-waiting]``
"""

from __future__ import annotations

import argparse
import logging
import os
import statistics
import threading
import time
from typing import Any

from bench_conversation import serve_process
from common import bench_cache, demo_run_args, print_figures

log = logging.getLogger("benchmarks")

N_TOKENS = 64
CONTEXT = 2048  # bounds the background requests, which have no max_tokens

PROMPTS = [
    "Describe the city of Lyon.",
    "Describe a house cat called Tom.",
    "Describe a red bicycle for sale.",
    "Describe the planet Mars.",
]
SCHEMAS: list[dict[str, Any]] = [
    {
        "type": "object",
        "properties": {
            "name": {"type": "string", "maxLength": 40},
            "kind": {"type": "string", "enum": ["city", "animal", "object", "planet"]},
            "facts": {"type": "array", "items": {"type": "string", "maxLength": 60}, "maxItems": 3},
            "rating": {"type": "integer", "minimum": 1, "maximum": 10},
        },
        "required": ["name", "kind", "facts", "rating"],
        "additionalProperties": False,
    },
    {
        "type": "object",
        "properties": {
            "title": {"type": "string", "maxLength": 60},
            "details": {
                "type": "object",
                "properties": {
                    "color": {"type": "string", "maxLength": 20},
                    "size_cm": {"type": "number", "minimum": 0, "maximum": 100000},
                },
                "required": ["color", "size_cm"],
            },
            "summary": {"type": "string", "maxLength": 200},
        },
        "required": ["title", "details", "summary"],
    },
]


def timed_stream(client: Any, messages: list[dict[str, Any]], **extra: Any) -> dict[str, float]:
    """Seconds to the first chunk, to the last, and the answer's tokens."""
    started = time.perf_counter()
    first = last = 0.0
    tokens = 0
    stream = client.chat.completions.create(
        model="m", messages=messages, stream=True, stream_options={"include_usage": True}, **extra
    )
    for chunk in stream:
        if chunk.choices and (chunk.choices[0].delta.content or chunk.choices[0].delta.tool_calls):
            last = time.perf_counter() - started
            first = first or last
        if chunk.usage is not None:
            tokens = chunk.usage.completion_tokens
    return {"ttft": first, "end": last, "tokens": float(tokens)}


def decode_rate(run: dict[str, float]) -> float:
    return (run["tokens"] - 1) / max(run["end"] - run["ttft"], 1e-9)


def constrained(client: Any, rounds: int) -> dict[str, list[float]]:
    rates: dict[str, list[float]] = {"schema": [], "free": []}
    for _ in range(rounds):
        for prompt in PROMPTS:
            for i, schema in enumerate(SCHEMAS):
                messages = [{"role": "user", "content": f"{prompt} Answer in JSON."}]
                fmt = {"type": "json_schema", "json_schema": {"name": f"s{i}", "schema": schema}}
                for kind, extra in (("schema", {"response_format": fmt}), ("free", {})):
                    run = timed_stream(
                        client, messages, temperature=0, max_tokens=N_TOKENS, **extra
                    )
                    if run["tokens"] > 8:  # too short an answer says nothing of a rate
                        rates[kind].append(decode_rate(run))
    return rates


def waiting(client: Any) -> dict[str, Any]:
    """A second user's TTFT while Open WebUI's background requests for the first user's chat
    generate, and the same on an idle server (both after the first chat, so the tools' shared
    prefix is kept either way)."""
    from open_webui_requests import (
        background_requests,
        chat_request,
        long_background_request,
        title_request,
    )

    question = "What is the tallest mountain in Europe?"
    title = threading.Thread(
        target=lambda: client.chat.completions.create(**title_request("m", question))
    )
    title.start()  # a new chat's title is asked with its first message
    first = client.chat.completions.create(**{**chat_request("m", question), "stream": False})
    title.join()
    idle = timed_stream(client, **_body(chat_request("m", "Name a good book about birds.")))
    history = [
        *chat_request("m", question)["messages"],
        {"role": "assistant", "content": first.choices[0].message.content or ""},
    ]
    finished: list[float] = []
    started = time.perf_counter()

    def background() -> None:
        for body in background_requests("m", history):  # one after the other, as it sends them
            client.chat.completions.create(**body)
            finished.append(time.perf_counter() - started)

    def long_request() -> None:
        client.chat.completions.create(**long_background_request("m"))
        finished.append(time.perf_counter() - started)

    threads = [threading.Thread(target=background), threading.Thread(target=long_request)]
    for thread in threads:
        thread.start()
    time.sleep(2.0)  # the background requests are generating when the second user writes
    busy = timed_stream(
        client, **_body(chat_request("m", "Give me a tip for learning the guitar."))
    )
    busy_at = 2.0 + busy["ttft"]
    for thread in threads:
        thread.join()
    log.info(
        "second user: TTFT %.2f s idle, %.2f s busy; tasks done at %s s",
        idle["ttft"],
        busy["ttft"],
        finished,
    )
    return {
        "idle": idle["ttft"],
        "busy": busy["ttft"],
        "tasks_done_s": finished,
        "asked_at_s": 2.0,
        "first_token_at_s": busy_at,
    }


def _body(request: dict[str, Any]) -> dict[str, Any]:
    """A recorded request as ``timed_stream``'s keywords (it streams and names the model)."""
    return {k: v for k, v in request.items() if k not in ("stream", "model")}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=2, help="passes over the prompts")
    parser.add_argument("--mode", default="pp", help="serve's mode for the constrained part")
    parser.add_argument("--no-waiting", action="store_true", help="only the constrained part")
    args = demo_run_args(parser)
    import openai

    from fleetgui.fleet.local_fleet.fleet import LocalFleet

    out: dict[str, Any] = {"machine": os.uname().machine}
    with LocalFleet(bench_cache() / "agent-api", cores={"w1": (1,)}) as fleet:
        (worker,) = fleet.start(["w1"])
        fleet.identity()
        identity = fleet.root / "coordinator"
        with serve_process(args.export, worker, identity, "--mode", args.mode) as (url, _):
            client = openai.OpenAI(base_url=url, api_key="none", max_retries=0, timeout=900)
            out["constrained"] = constrained(client, args.rounds)
        flags = ("--context", str(CONTEXT), "--mode", "pp+sd", "--draft", "ngram")
        for streams in () if args.no_waiting else ("4", "1"):
            with serve_process(args.export, worker, identity, *flags, "--max-streams", streams) as (
                url,
                _,
            ):
                client = openai.OpenAI(base_url=url, api_key="none", max_retries=0, timeout=900)
                out[f"waiting, {streams} streams"] = waiting(client)
    report(out)


def report(out: dict[str, Any]) -> None:
    rates = out["constrained"]
    schema, free = statistics.median(rates["schema"]), statistics.median(rates["free"])
    rows = [
        ("decode tok/s, unconstrained (median)", f"{free:.1f} ({len(rates['free'])} answers)"),
        ("decode tok/s, JSON schema (median)", f"{schema:.1f} ({len(rates['schema'])} answers)"),
        ("constrained / unconstrained", f"{schema / free:.1%}"),
    ]
    for key in [k for k in out if k.startswith("waiting")]:
        run = out[key]
        rows.append(
            (
                f"second user's TTFT, {key.split(', ')[1]}: idle / beside Open WebUI's tasks",
                f"{run['idle']:.2f} s / {run['busy']:.2f} s "
                f"(tasks done at {', '.join(f'{t:.0f}' for t in run['tasks_done_s'])} s)",
            )
        )
    print_figures("Agent API: SmolLM2-135M int8, coordinator + 1 worker", rows, out)


if __name__ == "__main__":
    main()
