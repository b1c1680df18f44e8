"""One pass of several streams travels as one message a hop, each entry checked as a single
FORWARD or RESULT is."""

from __future__ import annotations

import json
from typing import Any

import numpy as np
import pytest
from wire_support import DIST_A, PARAMS, hidden, tokens, wire

from fleetgui.net.batch_codec import (
    MAX_BATCH,
    encode_forward_batch,
    encode_result_batch,
    requests_from_message,
    results_from_message,
)
from fleetgui.net.protocol import ErrorCode, Message, Op, ProtocolError, decode, encode
from fleetgui.runtime.stage import (
    ForwardRequest,
    ForwardResult,
    GreedyHead,
    HeadOp,
    LogitsHead,
    SampleHead,
    VerifyGreedyHead,
    VerifySampleHead,
)
from fleetgui.runtime.token_logprobs import TokenLogprob
from fleetgui.runtime.token_mask import TokenMask

HEADS: dict[str, HeadOp | None] = {  # a head of every kind, and the tensors some carry
    "none": None,
    "greedy": GreedyHead(),
    "logits": LogitsHead(),
    "sample-logprobs": SampleHead(PARAMS, 0.25, logprobs=3),
    "verify-greedy-masked": VerifyGreedyHead((5, 7), TokenMask.allowing([[5], [7, 8], [1]], 40)),
    "verify-sample-masked": VerifySampleHead(
        PARAMS, (2, 0), (DIST_A, DIST_A), (0.1, 0.9), 0.5, TokenMask.allowing([[2], [0], [9]], 33)
    ),
}


@pytest.mark.parametrize("make", [tokens, hidden], ids=["token ids", "hidden states"])
def test_every_head_kind_travels_in_one_batch(make: Any) -> None:
    requests = [
        ForwardRequest(stream, make(1 + stream % 4), rewind=stream % 3, keep=stream, head=head)
        for stream, head in enumerate(HEADS.values())
    ]
    frames = encode_forward_batch(requests, request_id=5, extra_meta={"epoch": 3})
    message = decode(wire(frames))
    assert (message.op, message.request_id, message.meta["epoch"]) == (Op.FORWARD_BATCH, 5, 3)
    for sent, got in zip(requests, requests_from_message(message), strict=True):
        assert (got.stream_id, got.rewind, got.keep, got.head) == (
            sent.stream_id,
            sent.rewind,
            sent.keep,
            sent.head,
        )
        np.testing.assert_array_equal(got.payload, sent.payload)


def test_results_travel_back_in_order_with_their_own_fields() -> None:
    results = [
        ForwardResult(7, tokens=[3, 4], accepted=1, compute_ms={0: 1.5, 1: 2.0}),
        ForwardResult(2, tokens=[9], logprobs=(TokenLogprob(9, -0.5, ((9, -0.5),)),)),
    ]
    got = results_from_message(decode(wire(encode_result_batch(results, request_id=1))))
    assert [(r.stream_id, r.tokens, r.accepted, r.logprobs) for r in got] == [
        (7, [3, 4], 1, ()),
        (2, [9], 0, results[1].logprobs),
    ]
    assert got[0].compute_ms == {0: 1.5, 1: 2.0}
    hiddens = [ForwardResult(1, payload=hidden(3)), ForwardResult(4, payload=hidden(1))]
    back = results_from_message(decode(wire(encode_result_batch(hiddens))))
    for sent, got_one in zip(hiddens, back, strict=True):
        assert sent.payload is not None
        np.testing.assert_array_equal(got_one.payload, sent.payload)


def forged(meta_change: Any, tensors: tuple[np.ndarray, ...] | None = None) -> Message:
    """A FORWARD_BATCH of two greedy steps, changed by ``meta_change(meta)``."""
    requests = [ForwardRequest(1, tokens(1), head=HEADS["greedy"]), ForwardRequest(2, tokens(2))]
    message = decode(wire(encode_forward_batch(requests)))
    meta = json.loads(json.dumps(message.meta))
    meta_change(meta)
    forged = Message(
        Op.FORWARD_BATCH, meta=meta, tensors=message.tensors if tensors is None else tensors
    )
    return decode(wire(encode(forged)))


def _set(index: int, key: str, value: Any) -> Any:
    def change(meta: dict[str, Any]) -> None:
        meta["entries"][index][key] = value

    return change


@pytest.mark.parametrize(
    ("change", "code", "why"),
    [
        (_set(1, "stream", 1), ErrorCode.BAD_FIELD, "a stream appears twice"),
        (_set(0, "n", 2), ErrorCode.BAD_SHAPE, "does not hold the entries' positions"),
        (_set(0, "own", 1), ErrorCode.BAD_FIELD, "own 1 tensors, the message has 0"),
        (_set(0, "n", True), ErrorCode.BAD_FIELD, "integers 'n', 'own' and 'stream'"),
        (_set(1, "rewind", -1), ErrorCode.BAD_FIELD, "'rewind'"),
        (_set(0, "head", {"kind": "beam"}), ErrorCode.BAD_FIELD, "head.kind"),
        (lambda m: m.update(entries=[]), ErrorCode.BAD_FIELD, f"1 to {MAX_BATCH}"),
        (lambda m: m.update(entries=[3, 4]), ErrorCode.BAD_FIELD, "each entry is an object"),
    ],
)
def test_a_forged_batch_is_refused_naming_what_is_wrong(
    change: Any, code: ErrorCode, why: str
) -> None:
    message = forged(change)
    with pytest.raises(ProtocolError, match=why) as caught:
        requests_from_message(message)
    assert caught.value.code == code


def test_a_batch_beyond_its_limit_is_not_sent() -> None:
    requests = [ForwardRequest(s, tokens(1)) for s in range(MAX_BATCH + 1)]
    with pytest.raises(ValueError, match=f"1 to {MAX_BATCH} streams"):
        encode_forward_batch(requests)
    with pytest.raises(ProtocolError, match="expected FORWARD_BATCH"):
        requests_from_message(Message(Op.RESULT_BATCH, meta={"entries": []}))
