"""What the tests of ``fleetgui serve`` share: a server process on a free port, its client,
the flags that put its stages on workers, and a streamed answer's text."""

from __future__ import annotations

import asyncio
import json
import os
import re
import subprocess
import sys
import threading
import time
import urllib.request
from collections.abc import Callable, Coroutine, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, TypeVar

import pytest
from fleet_support import WorkerProcess
from runtime_support import EXACT

from fleetgui.api.served import ServedModel, local_stage_streams
from fleetgui.api.server import ApiServer, ServerConfig
from fleetgui.runtime.loader import load_local_pipeline
from fleetgui.runtime.route import LocalRoute

KEY = "sk-test-4f1b2c"
READY_TIMEOUT_S = 120.0
T = TypeVar("T")


def fleet_args(workers: list[WorkerProcess], identity_dir: Path) -> list[str]:
    return [
        "--workers", ",".join(w.address for w in workers), "--identity", str(identity_dir),
        "--precision", "f32", "--threads", "1",
    ]  # fmt: skip


@dataclass
class Served:
    process: subprocess.Popen[str]
    url: str
    name: str
    log: Path
    printed: str = ""  # what it printed before it was ready

    def client(self, key: str = KEY, **options: Any) -> Any:
        import openai  # the tests that use it skip without it

        return openai.OpenAI(base_url=self.url, api_key=key, max_retries=0, **options)

    def health(self) -> dict[str, Any]:
        request = urllib.request.Request(
            self.url.removesuffix("/v1") + "/health", headers={"Authorization": f"Bearer {KEY}"}
        )
        with urllib.request.urlopen(request, timeout=10) as answer:
            return json.loads(answer.read())


@contextmanager
def serving(home: Path, export_dir: Path, *args: str) -> Iterator[Served]:
    """A ``fleetgui serve`` process on a free port; SIGTERM after (it must exit 0)."""
    home.mkdir(parents=True, exist_ok=True)
    log = home / "serve.log"
    env = {**os.environ, "FLEETGUI_HOME": str(home), "PYTHONUNBUFFERED": "1"}
    process = subprocess.Popen(
        [sys.executable, "-m", "fleetgui", "serve", str(export_dir), "--port", "0", *args],
        stdout=subprocess.PIPE,
        stderr=open(log, "w"),  # noqa: SIM115
        text=True,
        env=env,
    )
    assert process.stdout is not None
    deadline = time.monotonic() + READY_TIMEOUT_S
    ready = None
    printed: list[str] = []
    while time.monotonic() < deadline:
        line = process.stdout.readline()
        if not line:
            break
        ready = re.match(r"fleetgui serve: (\S+) at (http://\S+)", line)
        if ready:
            break
        printed.append(line)
    if ready is None:
        process.kill()
        process.wait(10)
        pytest.fail(f"fleetgui serve did not start:\n{log.read_text()[-3000:]}")
    try:
        yield Served(process, ready.group(2), ready.group(1), log, "".join(printed))
    finally:
        process.terminate()
        try:
            code = process.wait(20)
        except subprocess.TimeoutExpired:
            process.kill()
            code = process.wait(10)
        assert code == 0, log.read_text()[-3000:]


def streamed_text(stream: Any) -> tuple[str, str | None, Any]:
    """(text, finish_reason, usage) of a streamed chat completion."""
    parts, finish, usage = [], None, None
    for chunk in stream:
        if chunk.usage is not None:
            usage = chunk.usage
        for choice in chunk.choices:
            if choice.delta.content:
                parts.append(choice.delta.content)
            if choice.finish_reason:
                finish = choice.finish_reason
    return "".join(parts), finish, usage


@contextmanager
def in_process_server(
    export_dir: Path, *, kv_reuse: bool = False, **config: Any
) -> Iterator[tuple[ApiServer, Callable]]:
    """An ``ApiServer`` over an in-process pipeline, on an event loop in a thread; yields it
    and a function running a coroutine on that loop. Without ``kv_reuse`` every stream is
    freed as it ends (the tests watch the stages empty out)."""
    loop = asyncio.new_event_loop()
    thread = threading.Thread(target=loop.run_forever, daemon=True)
    thread.start()

    def call(coro: Coroutine[Any, Any, T]) -> T:
        return asyncio.run_coroutine_threadsafe(coro, loop).result(60)

    async def start() -> ApiServer:
        pipeline = load_local_pipeline(export_dir, config=replace(EXACT, kv_reuse=kv_reuse))
        assert isinstance(pipeline.route, LocalRoute)
        served = ServedModel(pipeline, "tiny", stage_streams=local_stage_streams(pipeline.route))
        server = ApiServer(served, ServerConfig(port=0, **config))
        await server.start()
        return server

    server = call(start())
    try:
        yield server, call
    finally:
        call(server.stop())
        call(server.served.pipeline.close())
        loop.call_soon_threadsafe(loop.stop)
        thread.join(10)
        loop.close()
