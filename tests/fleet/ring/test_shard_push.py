"""Pushing an export's stage files to a worker (``fleetgui.fleet.ring.shard_push``), on a real
worker process: cached, resumable, and a file damaged on the worker's disk sent again."""

from __future__ import annotations

import asyncio
import hashlib
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest
from fleet_support import fast_coordinator, greedy_in, worker_process
from runtime_support import TINY_PROMPTS

from fleetgui.fleet.ring.shard_push import DeployProgress, push_files, stage_files
from fleetgui.fleet.session.session import FleetSession
from fleetgui.net.keys import KeyPair
from fleetgui.net.protocol import Message, Op, RemoteError

pytestmark = pytest.mark.slow

N_NEW = 40
PROMPTS = TINY_PROMPTS


def test_deploy_is_cached_resumable_and_resends_a_corrupted_file(
    tiny_export: Callable[..., Path],
    tiny_greedy: Callable[[str, int], list[int]],
    identity: KeyPair,
    root: Path,
    authorized_keys: Path,
) -> None:
    references = {p: tiny_greedy(p, N_NEW) for p in PROMPTS}
    export_dir = tiny_export(2)
    from fleetgui.export.manifest import read_manifest

    manifest = read_manifest(export_dir)
    files = stage_files(manifest, [1])
    weights = max(files, key=lambda f: f.size)
    worker = worker_process(root / "deploy", "d1", authorized_keys).start()
    try:

        async def main() -> None:
            session = FleetSession(identity, fast_coordinator())
            await session.connect([worker.endpoint])
            link = session.workers.links["d1"]
            try:
                # An upload interrupted after its first chunk resumes there.
                progress: list[DeployProgress] = []
                first = weights.size // 3
                data = (export_dir / weights.path).read_bytes()[:first]
                await link.call(
                    Message(
                        Op.PUT_CHUNK,
                        meta={"sha256": weights.sha256, "size": weights.size, "offset": 0},
                        tensors=(np.frombuffer(data, np.uint8),),
                    )
                )
                sent = await push_files(link, export_dir, files, progress.append, chunk_bytes=4096)
                assert sent == sum(f.size for f in files) - first
                assert progress[-1].sent == progress[-1].total == sent
                # A file already there is not sent again.
                assert await push_files(link, export_dir, files) == 0
                # A file damaged on the worker's disk is found by its hash and sent again.
                blob = worker.home / "cache" / "blobs" / weights.sha256
                damaged = bytearray(blob.read_bytes())
                damaged[len(damaged) // 2] ^= 0xFF
                blob.write_bytes(bytes(damaged))
                assert hashlib.sha256(blob.read_bytes()).hexdigest() != weights.sha256
                assert await push_files(link, export_dir, files) == weights.size
                assert hashlib.sha256(blob.read_bytes()).hexdigest() == weights.sha256
                # Damage found when the next deployment asks is repaired the same way.
                blob.write_bytes(bytes(damaged))
                await session.deploy(export_dir)
                result = await session.pipeline().complete(PROMPTS[0], greedy_in("pp", N_NEW))
                assert result.token_ids == references[PROMPTS[0]]
                # A chunk at the wrong offset is refused, nothing is written.
                with pytest.raises(RemoteError, match="resume there"):
                    await link.call(
                        Message(
                            Op.PUT_CHUNK,
                            meta={"sha256": "ab" * 32, "size": 100, "offset": 50},
                            tensors=(np.zeros(10, np.uint8),),
                        )
                    )
            finally:
                await session.close()

        asyncio.run(main())
    finally:
        worker.stop()
