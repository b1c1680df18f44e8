"""``fleetgui serve``: the OpenAI-compatible API, driven by the official ``openai`` client.

Most tests run against a real ``fleetgui serve`` process on a tiny 3-stage export with a ChatML
template (stage 0 in the server, stages 1 and 2 on 2 real worker processes on loopback, CURVE
on, f32), whose greedy text is compared with ``fleetgui generate --chat`` on the same workers.
The queue and 429 test runs the same server class in this process on an in-process pipeline,
where it can hold requests at exact points. The real SmolLM2 answers a question and stops at
its end-of-turn token ("stop") exactly as ``generate --chat`` does.
"""

from __future__ import annotations

import asyncio
import json
import re
import shutil
import socket
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, TypeVar

import pytest
from cli_support import run_cli
from fleet_support import WorkerProcess, running_workers
from gguf_support import CHATML
from runtime_support import export
from serve_support import KEY, Served, fleet_args, in_process_server, serving, streamed_text

openai = pytest.importorskip("openai")
pytest.importorskip("aiohttp")

from fleetgui.api.keys import resolve_api_key  # noqa: E402
from fleetgui.runtime.tokenizer import Tokenizer, tokenizer_dir_of  # noqa: E402

QUESTION = "Tell me about the old lighthouse keeper."
N_TOKENS = 24
T = TypeVar("T")


# -- fixtures: a chat export, 2 workers, the generate --chat reference, the server -------------


@pytest.fixture(scope="module")
def chat_model(tiny_models: Callable[..., Path], root: Path) -> Path:
    """The tiny Llama with a ChatML template (its tokenizer has no <|im_end|> token, so its
    replies run to max_tokens: "length")."""
    model = root / "chat-model"
    shutil.copytree(tiny_models("llama"), model)
    (model / "chat_template.jinja").write_text(CHATML)
    return model


@pytest.fixture(scope="module")
def chat_export(chat_model: Path, root: Path) -> Path:
    return export(chat_model, root / "chat-3s", stages=3)


@pytest.fixture(scope="module")
def workers(live_workers: list[WorkerProcess]) -> list[WorkerProcess]:
    """Two of the session's workers: stages 1 and 2 of the 3-stage export."""
    return live_workers[:2]


@pytest.fixture(scope="module")
def reference(
    chat_export: Path, workers: list[WorkerProcess], identity_dir: Path, root: Path
) -> dict[str, Any]:
    """``fleetgui generate --chat`` on the same workers (run before the server deploys)."""
    run = run_cli(
        root / "home", "generate", str(chat_export), "--chat", "--prompt", QUESTION, "--json",
        "--max-new-tokens", str(N_TOKENS), *fleet_args(workers, identity_dir),
    )  # fmt: skip
    assert run.returncode == 0, run.stderr[-3000:]
    return json.loads(run.stdout.splitlines()[0])


@pytest.fixture(scope="module")
def server(
    chat_export: Path,
    workers: list[WorkerProcess],
    identity_dir: Path,
    root: Path,
    reference: dict[str, Any],
) -> Iterator[Served]:
    # every stream is freed as it ends: the tests count what the stages hold (reuse: its own test)
    args = [
        *fleet_args(workers, identity_dir),
        "--mode",
        "pp+mb",
        "--api-key",
        KEY,
        "--no-kv-reuse",
    ]
    with serving(root / "serve-home", chat_export, *args) as served:
        yield served


def _chat(**extra: Any) -> dict[str, Any]:
    return {
        "messages": [{"role": "user", "content": QUESTION}],
        "temperature": 0,
        "max_tokens": N_TOKENS,
        **extra,
    }


# -- the fleet server ---------------------------------------------------------------------------


@pytest.mark.slow
def test_models_lists_the_served_export(server: Served, chat_export: Path) -> None:
    models = server.client().models.list()
    assert [m.id for m in models.data] == [chat_export.name] == [server.name]
    assert models.data[0].owned_by == "fleetgui"
    assert server.client().models.retrieve(server.name).id == server.name


@pytest.mark.slow
def test_chat_completions_equal_generate_chat_and_count_usage(
    server: Served, reference: dict[str, Any], chat_export: Path
) -> None:
    client = server.client()
    whole = client.chat.completions.create(model=server.name, **_chat())
    text, finish, usage = streamed_text(
        client.chat.completions.create(
            model=server.name, stream=True, stream_options={"include_usage": True}, **_chat()
        )
    )
    assert whole.choices[0].message.content == reference["text"] == text
    assert whole.choices[0].message.role == "assistant"
    assert whole.choices[0].finish_reason == "length" == finish  # max_tokens: "length"
    prompt_tokens = len(Tokenizer(tokenizer_dir_of(chat_export)).encode(reference["prompt"]))
    for counted in (whole.usage, usage):
        assert counted.prompt_tokens == prompt_tokens
        assert counted.completion_tokens == len(reference["token_ids"]) == N_TOKENS
        assert counted.total_tokens == prompt_tokens + N_TOKENS
    # without include_usage a stream has no usage chunk
    assert (
        streamed_text(client.chat.completions.create(model=server.name, stream=True, **_chat()))[2]
        is None
    )
    # the rendered chat prompt as a plain completion continues the same way
    plain = client.completions.create(
        model=server.name, prompt=reference["prompt"], temperature=0, max_tokens=N_TOKENS
    )
    assert plain.choices[0].text == reference["text"]
    assert plain.usage.prompt_tokens == prompt_tokens


@pytest.mark.slow
def test_a_stop_string_ends_the_answer_with_stop(server: Served, reference: dict[str, Any]) -> None:
    text = reference["text"]
    # two plain letters past the first third: the answer is the text before their first place
    start = next(i for i in range(len(text) // 3, len(text) - 1) if text[i : i + 2].isalpha())
    stop = text[start : start + 2]
    cut = text.find(stop)
    client = server.client()
    whole = client.chat.completions.create(model=server.name, **_chat(stop=[stop]))
    assert whole.choices[0].message.content == text[:cut]
    assert whole.choices[0].finish_reason == "stop"
    streamed, finish, _ = streamed_text(
        client.chat.completions.create(model=server.name, stream=True, **_chat(stop=stop))
    )
    assert (streamed, finish) == (text[:cut], "stop")


@pytest.mark.slow
def test_four_concurrent_streams_each_get_their_own_text(server: Served) -> None:
    client = server.client()
    questions = [f"Question number {i}: what is {i} plus {i}?" for i in range(4)]

    def chat(question: str, **extra: Any) -> Any:
        body = {**_chat(), "messages": [{"role": "user", "content": question}], **extra}
        return client.chat.completions.create(model=server.name, **body)

    alone = [chat(q, max_tokens=48).choices[0].message.content for q in questions]
    assert len(set(alone)) == 4  # different prompts, different answers

    def streamed(question: str) -> tuple[str, float, float]:
        stream = chat(question, stream=True, max_tokens=48)
        first = last = 0.0
        parts = []
        for chunk in stream:
            if chunk.choices and chunk.choices[0].delta.content:
                last = time.perf_counter()
                first = first or last
                parts.append(chunk.choices[0].delta.content)
        return "".join(parts), first, last

    with ThreadPoolExecutor(4) as pool:
        results = list(pool.map(streamed, questions))
    assert [text for text, _, _ in results] == alone  # greedy: each its own, as alone
    firsts = [r[1] for r in results]
    lasts = [r[2] for r in results]
    assert max(firsts) < min(lasts)  # every stream had begun before any had ended


@pytest.mark.slow
def _forwards(worker: WorkerProcess, identity_dir: Path) -> int:
    """FORWARDs ``worker`` has run (its heartbeat says), asked over its encrypted port."""
    from fleetgui.net.keys import load_identity
    from fleetgui.net.protocol import Message, Op
    from fleetgui.net.secure_socket import SecureClient

    async def ask() -> int:
        client = SecureClient(load_identity(identity_dir), worker.info["public_key"])
        try:
            await client.connect(worker.endpoint.endpoint, timeout_s=10)
            reply = await client.request(Message(Op.HEARTBEAT), timeout_s=10)
            return int(reply.meta["forwards"])
        finally:
            client.close()

    return asyncio.run(ask())


def test_a_cancelled_stream_frees_its_stream_on_every_stage(
    server: Served, workers: list[WorkerProcess], identity_dir: Path
) -> None:
    """The stream is freed because the client left, not because the answer ran out: the last
    worker ran far fewer passes than 400 tokens take (a deadline alone failed under load)."""
    client = server.client()
    before = _forwards(workers[-1], identity_dir)
    stream = client.chat.completions.create(model=server.name, stream=True, **_chat(max_tokens=400))
    seen = 0
    for chunk in stream:
        seen += bool(chunk.choices and chunk.choices[0].delta.content)
        if seen == 3:
            break
    during = server.health()
    assert during["streams"]["active"] == 1
    assert set(during["stages"]) == {"coordinator", "w1", "w2"}
    assert all(count == 1 for count in during["stages"].values()), during
    stream.close()  # the client goes away mid-stream
    closed = time.perf_counter()
    while True:
        health = server.health()
        if health["streams"]["active"] == 0 and not any(health["stages"].values()):
            break
        assert time.perf_counter() - closed < 60, health
        time.sleep(0.02)
    assert _forwards(workers[-1], identity_dir) - before < 100  # not the whole 400 tokens
    after = client.chat.completions.create(model=server.name, **_chat(max_tokens=4))
    assert after.choices[0].finish_reason == "length"
    assert not any(server.health()["stages"].values())


@pytest.mark.slow
def test_a_missing_or_wrong_key_gets_401(server: Served) -> None:
    for key in ("sk-wrong", KEY + "x"):
        with pytest.raises(openai.AuthenticationError) as caught:
            server.client(key=key).models.list()
        assert caught.value.status_code == 401
        assert caught.value.body["code"] == "invalid_api_key"
    request = urllib.request.Request(server.url + "/models")  # no Authorization at all
    with pytest.raises(urllib.error.HTTPError) as raw:
        urllib.request.urlopen(request, timeout=10)
    assert raw.value.code == 401
    assert set(json.loads(raw.value.read())["error"]) == {"message", "type", "param", "code"}


def _post(url: str, data: bytes) -> tuple[int, dict[str, Any]]:
    request = urllib.request.Request(
        url,
        data=data,
        headers={"Authorization": f"Bearer {KEY}", "Content-Type": "application/json"},
    )
    try:
        with urllib.request.urlopen(request, timeout=10) as answer:
            return answer.status, json.loads(answer.read())
    except urllib.error.HTTPError as exc:
        return exc.code, json.loads(exc.read())


@pytest.mark.slow
def test_bad_requests_get_400_with_an_openai_error_object(server: Served) -> None:
    status, body = _post(server.url + "/chat/completions", b'{"model": "x", "messages": [')
    assert status == 400
    assert set(body["error"]) == {"message", "type", "param", "code"}
    assert body["error"]["type"] == "invalid_request_error"
    assert "JSON" in body["error"]["message"]
    client = server.client()
    with pytest.raises(openai.BadRequestError) as unknown:
        client.chat.completions.create(**{**_chat(), "model": "gpt-4o"})
    assert unknown.value.body["code"] == "model_not_found"
    assert unknown.value.body["param"] == "model"
    assert server.name in unknown.value.body["message"]
    with pytest.raises(openai.BadRequestError) as zero:
        client.chat.completions.create(model=server.name, **_chat(max_tokens=0))
    assert zero.value.body["param"] == "max_tokens"
    with pytest.raises(openai.BadRequestError) as zero_completion:
        client.completions.create(model=server.name, prompt="x", max_tokens=0)
    assert zero_completion.value.status_code == 400
    with pytest.raises(openai.BadRequestError) as bad_role:
        client.chat.completions.create(
            model=server.name, messages=[{"role": "wizard", "content": "x"}]
        )
    assert bad_role.value.body["param"] == "messages[0].role"


@pytest.mark.slow
def test_a_prompt_over_the_context_gets_400_naming_the_limit(server: Served) -> None:
    long_question = "lighthouse " * 700  # well over the tiny model's 512 positions
    with pytest.raises(openai.BadRequestError) as caught:
        server.client().chat.completions.create(
            model=server.name,
            **{**_chat(), "messages": [{"role": "user", "content": long_question}]},
        )
    error = caught.value.body
    assert error["code"] == "context_length_exceeded"
    assert "512" in error["message"]


@pytest.mark.slow
def test_one_timed_log_line_per_request_with_why_refused_never_the_prompt(server: Served) -> None:
    def request_lines() -> list[str]:
        return [
            line
            for line in server.log.read_text().splitlines()
            if "fleetgui.api.server: " in line and " /v1/" in line
        ]

    client = server.client()
    before = len(request_lines())
    client.chat.completions.create(model=server.name, **_chat(max_tokens=5))
    with pytest.raises(openai.BadRequestError):
        client.chat.completions.create(model=server.name, **_chat(max_tokens=0))
    deadline = time.monotonic() + 5
    while len(request_lines()) < before + 2 and time.monotonic() < deadline:
        time.sleep(0.02)
    time.sleep(0.2)  # no third line comes
    lines = request_lines()[before:]
    assert len(lines) == 2, lines  # one line per request
    stamp = r"^\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3} "  # every line says when
    assert re.search(stamp + r".*POST /v1/chat/completions 200 5 tokens \d+ ms$", lines[0]), lines
    # a refused request's line says why, as the client's error does
    refused = r"POST /v1/chat/completions 400 0 tokens \d+ ms: .*max_tokens"
    assert re.search(stamp + ".*" + refused, lines[1]), lines
    assert QUESTION not in server.log.read_text()  # --log-level info: never the prompt


# -- refusals before serving ----------------------------------------------------------------------


def test_serving_on_all_interfaces_without_a_key_is_refused(tmp_path: Path) -> None:
    run = run_cli(tmp_path, "serve", str(tmp_path / "no-export"), "--host", "0.0.0.0", timeout=120)
    assert run.returncode == 1
    assert "--api-key" in run.stderr and "0.0.0.0" in run.stderr
    assert len(run.stderr.strip().splitlines()) == 1  # one line, before loading anything


def test_pp_sd_without_a_draft_is_refused(tmp_path: Path) -> None:
    run = run_cli(tmp_path, "serve", str(tmp_path), "--mode", "pp+sd", timeout=120)
    assert run.returncode == 1 and "--draft" in run.stderr


def test_the_api_key_can_come_from_the_os_keyring(
    monkeypatch: pytest.MonkeyPatch, os_keyring: Any
) -> None:
    key, created = resolve_api_key("keyring")
    assert created and key.startswith("sk-") and len(key) > 20
    assert os_keyring.store[("fleetgui", "api-key")] == key
    assert resolve_api_key("keyring") == (key, False)  # the same key next time
    assert resolve_api_key("sk-given") == ("sk-given", False)
    monkeypatch.setenv("FLEETGUI_API_KEY", "sk-from-env")
    assert resolve_api_key(None) == ("sk-from-env", False)


# -- the queue behind --max-streams, in this process ----------------------------------------------


@pytest.mark.slow
def test_beyond_the_streams_and_the_queue_a_request_gets_429(chat_model: Path, root: Path) -> None:
    export_dir = export(chat_model, root / "chat-2s", stages=2)
    with in_process_server(export_dir, max_streams=1, max_queued=1) as (server, _):
        client = openai.OpenAI(base_url=server.url, api_key="none", max_retries=0)
        long_chat = {**_chat(), "max_tokens": 450}
        first = client.chat.completions.create(model="tiny", stream=True, **long_chat)
        next(iter(first))  # generating: the one stream slot is taken
        assert server.admission.active == 1
        with ThreadPoolExecutor(1) as pool:
            waiting = pool.submit(
                client.chat.completions.create, model="tiny", **{**_chat(), "max_tokens": 3}
            )
            deadline = time.monotonic() + 10
            while server.admission.waiting < 1:
                assert time.monotonic() < deadline
                time.sleep(0.01)
            with pytest.raises(openai.RateLimitError) as refused:
                client.chat.completions.create(model="tiny", **_chat())
            assert refused.value.status_code == 429
            assert refused.value.body["code"] == "rate_limit_exceeded"
            first.close()  # the queued request gets the slot once the first one has gone
            served = waiting.result(30)
        assert served.choices[0].finish_reason == "length"
        assert served.usage.completion_tokens == 3
        stages = server.served.pipeline.route.stages  # type: ignore[attr-defined]
        assert all(not stage.stream_ids() for stage in stages)
        assert (server.admission.active, server.admission.waiting) == (0, 0)


# -- the real SmolLM2 ---------------------------------------------------------------------------


@pytest.mark.slow
def test_smollm2_answers_and_stops_at_its_end_of_turn_as_generate_chat_does(
    root: Path, identity_dir: Path, authorized_keys: Path, smollm2_demo_export: Path
) -> None:
    smollm2 = smollm2_demo_export
    question = "What is the capital of France?"
    with running_workers(root / "smol", ["s1", "s2"], authorized_keys) as smol_workers:
        fleet = fleet_args(smol_workers, identity_dir)
        run = run_cli(
            root / "home", "generate", str(smollm2), "--chat", "--prompt", question, "--json",
            "--max-new-tokens", "48", *fleet,
        )  # fmt: skip
        assert run.returncode == 0, run.stderr[-3000:]
        want = json.loads(run.stdout.splitlines()[0])
        assert "Paris" in want["text"] and want["finish_reason"] == "eos"
        with serving(root / "smol-home", smollm2, *fleet, "--api-key", KEY) as served:
            client = served.client()
            body = {
                "messages": [{"role": "user", "content": question}],
                "temperature": 0,
                "max_tokens": 48,
            }
            whole = client.chat.completions.create(model=served.name, **body)
            text, finish, usage = streamed_text(
                client.chat.completions.create(
                    model=served.name,
                    stream=True,
                    stream_options={"include_usage": True},
                    **body,
                )
            )
        # a whole copy on each worker: two users at once, one on each copy, the same answer
        copies = [*fleet, "--layout", "copies", "--max-streams", "2", "--api-key", KEY]
        with serving(root / "smol-copies", smollm2, *copies) as served:
            client = served.client()
            with ThreadPoolExecutor(2) as pool:
                answers = list(
                    pool.map(
                        lambda _: client.chat.completions.create(model=served.name, **body),
                        range(2),
                    )
                )
            health = served.health()
        # auto: the planner measures the PCs and picks; what it printed is what it serves
        auto = [*fleet, "--layout", "auto", "--max-streams", "2", "--api-key", KEY]
        with serving(root / "smol-auto", smollm2, *auto) as served:
            answer = served.client().chat.completions.create(model=served.name, **body)
            chosen = served.health()["stages"]
            printed = served.printed
    assert [a.choices[0].message.content for a in answers] == [want["text"]] * 2
    assert health["stages"] == {"s1": 0, "s2": 0}  # by copy; both done and freed
    assert answer.choices[0].message.content == want["text"]
    assert "for 2 user(s)" in printed and "Deploy runs" in printed, printed
    if "whole copies" in printed.rsplit("Deploy runs", 1)[1]:
        assert set(chosen) == {"s1", "s2"}, (printed, chosen)
    else:
        assert "coordinator" in chosen, (printed, chosen)
    assert whole.choices[0].message.content == want["text"] == text
    assert whole.choices[0].finish_reason == "stop" == finish  # its <|im_end|>: "stop"
    prompt_tokens = len(Tokenizer(tokenizer_dir_of(smollm2)).encode(want["prompt"]))
    for counted in (whole.usage, usage):
        assert counted.prompt_tokens == prompt_tokens
        assert counted.completion_tokens == len(want["token_ids"])


@pytest.mark.slow
def test_a_client_leaving_a_non_streamed_request_frees_its_stream(
    chat_model: Path, root: Path
) -> None:
    """The handler is cancelled when the client leaves, not run out. The client leaves while the
    first token is being reported (the report waits for it), so the test holds at any speed: a
    deadline-based client once saw the whole context-capped answer finish within 0.15 s."""
    from fleetgui.runtime.metrics import TokensEmitted

    export_dir = export(chat_model, root / "chat-2s", stages=2)
    with in_process_server(export_dir, max_streams=1) as (server, _):
        made, first, gone = [0], threading.Event(), threading.Event()

        def count(event: object) -> None:
            if isinstance(event, TokensEmitted):
                made[0] += event.count
                if not first.is_set():
                    first.set()
                    gone.wait(30)  # hold the generation until the client has left

        server.served.pipeline.metrics.subscribe(count)
        host, port = server.url.split("//")[1].split("/")[0].rsplit(":", 1)
        request = {k: v for k, v in _chat().items() if k != "max_tokens"}  # the context's room
        body = json.dumps({"model": "tiny", **request}).encode()
        with socket.create_connection((host, int(port))) as client:
            client.sendall(
                b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\n"
                b"Content-Type: application/json\r\n"
                + f"Content-Length: {len(body)}\r\n\r\n".encode()
                + body
            )
            assert first.wait(60), "the server never started the answer"
        gone.set()
        left = time.perf_counter()
        stages = server.served.pipeline.route.stages  # type: ignore[attr-defined]
        while server.admission.active or any(stage.stream_ids() for stage in stages):
            assert time.perf_counter() - left < 60
            time.sleep(0.01)
        made_before_leaving = made[0]
        whole = openai.OpenAI(base_url=server.url, api_key="none", max_retries=0)
        full = whole.chat.completions.create(model="tiny", **request)  # the slot is free again
        assert full.usage is not None and full.choices[0].finish_reason == "length"
        assert made_before_leaving < full.usage.completion_tokens  # stopped when it left


@pytest.mark.slow
def test_a_conversation_resent_turn_by_turn_reuses_its_kv_and_says_so(
    chat_model: Path, root: Path
) -> None:
    """An OpenAI client resends the whole history each turn: with reuse (``serve``'s default)
    each turn after the first reports the prompt tokens it did not compute again
    (``usage.prompt_tokens_details.cached_tokens``), and every answer is the one a server
    without reuse gives."""
    export_dir = export(chat_model, root / "chat-2s-reuse", stages=2)
    questions = [QUESTION, "Say it again, more briefly.", "And once more, in other words."]

    def conversation(kv_reuse: bool) -> list[Any]:
        with in_process_server(export_dir, kv_reuse=kv_reuse) as (server, _):
            client = openai.OpenAI(base_url=server.url, api_key="none", max_retries=0)
            messages: list[dict[str, str]] = [{"role": "system", "content": "Be helpful."}]
            answers = []
            for question in questions:
                messages.append({"role": "user", "content": question})
                answer = client.chat.completions.create(
                    model="tiny", messages=messages, temperature=0, max_tokens=N_TOKENS
                )
                messages.append({"role": "assistant", "content": answer.choices[0].message.content})
                answers.append(answer)
            return answers

    warm, cold = conversation(True), conversation(False)
    assert [a.choices[0].message.content for a in warm] == [
        a.choices[0].message.content for a in cold
    ]
    cached = [a.usage.prompt_tokens_details.cached_tokens for a in warm]
    assert cached[0] == 0 and all(
        0 < n < a.usage.prompt_tokens for n, a in zip(cached[1:], warm[1:], strict=True)
    )
    assert cached[2] > cached[1]  # the longer history, all of it kept
    assert all(a.usage.prompt_tokens_details.cached_tokens == 0 for a in cold)
