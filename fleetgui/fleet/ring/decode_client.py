"""The coordinator's side of one DECODE: send it to the worker holding the whole model, yield
each step's result as it arrives, and end the worker's run if the caller stops reading early,
so the stream's cache never has two writers (see :mod:`fleetgui.worker.decode_run`)."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncGenerator

from fleetgui.fleet.ring.link import Dispatcher, WorkerLink, WorkerLostError
from fleetgui.net.decode_codec import DecodeSteps, encode_decode
from fleetgui.net.forward_codec import result_from_message
from fleetgui.net.protocol import Flags, Message, Op, RemoteError, raise_if_error
from fleetgui.net.secure_socket import RequestTimeoutError
from fleetgui.runtime.stage import ForwardResult


async def decode_on_worker(
    link: WorkerLink,
    dispatcher: Dispatcher,
    steps: DecodeSteps,
    *,
    epoch: int,
    timeout_s: float,
) -> AsyncGenerator[ForwardResult, None]:
    """The results of ``steps`` run on ``link``'s worker, in order. Raises
    :class:`WorkerLostError` or :class:`RequestTimeoutError` (no step for ``timeout_s``) when
    the worker is gone, :class:`RemoteError` when it refused."""
    request_id, results = dispatcher.new_stream(owner=link)
    ended = False
    try:
        await link.send(encode_decode(steps, request_id=request_id, extra_meta={"epoch": epoch}))
        while not ended:
            try:
                async with asyncio.timeout(timeout_s):
                    item = await results.get()
            except TimeoutError:
                raise RequestTimeoutError(
                    f"no decode step from {link.name!r} within {timeout_s:g} s"
                ) from None
            if isinstance(item, BaseException):
                ended = True  # the worker is gone: nothing to stop there
                raise item
            ended = bool(item.flags & Flags.FINAL) or item.op is Op.ERROR
            yield result_from_message(raise_if_error(item, f"worker {link.name!r}"))
    except RequestTimeoutError:
        ended = True  # silent: a STOP_DECODE would wait out its timeout too
        raise
    finally:
        dispatcher.forget(request_id)
        if not ended:
            with contextlib.suppress(WorkerLostError, RequestTimeoutError, RemoteError):
                await link.call(Message(Op.STOP_DECODE), stream_id=steps.stream_id)
