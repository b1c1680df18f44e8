"""FedTokens: which tokens a KV cache holds and how to bring it to the committed text."""

from __future__ import annotations

from fleetgui.runtime.kv_mask import StreamMask
from fleetgui.runtime.sequence import CompactionPolicy, FedTokens


def test_prefill_then_plain_decoding() -> None:
    fed = FedTokens()
    assert fed.plan([1, 2, 3]) == (0, [1, 2, 3])
    fed.applied(0, [1, 2, 3])
    assert fed.plan([1, 2, 3, 4]) == (0, [4])


def test_target_round_with_rejected_drafts() -> None:
    """Target fed [last, d1, d2, d3]; d1 accepted, d2 rejected and replaced by c."""
    fed = FedTokens()
    fed.applied(0, [1, 2, 3])  # prompt (its last token is fed with the drafts)
    rewind, pending = fed.plan([1, 2, 3, 4])
    fed.applied(rewind, [*pending, 10, 11, 12])  # last committed token 4, drafts 10 11 12
    committed = [1, 2, 3, 4, 10, 20]  # 10 accepted, 11 rejected -> correction 20
    assert fed.plan(committed) == (2, [20])  # mask out 11 and 12, feed the correction
    fed.applied(2, [20])
    assert fed.fed == committed and fed.entries == 8 and fed.masked == 2


def test_draft_proposals_do_not_count_as_committed() -> None:
    """The draft feeds its own proposals one by one; after a rejection the proposals it fed
    must be rewound, even though each was 'agreed' while proposing."""
    fed = FedTokens()
    committed = [1, 2, 3]
    fed.applied(*fed.plan(committed, len(committed)))
    drafts = [7, 8, 9]
    for i in range(1, len(drafts)):  # feeds 7, then 8 (the last proposal is not fed)
        rewind, pending = fed.plan(committed + drafts[:i], len(committed))
        assert (rewind, pending) == (0, [drafts[i - 1]])
        fed.applied(rewind, pending)
    committed = [1, 2, 3, 5]  # the very first draft (7) was rejected, 5 is the correction
    rewind, pending = fed.plan(committed, len(committed))
    assert (rewind, pending) == (2, [5])


def test_all_drafts_accepted_feeds_the_missing_one() -> None:
    fed = FedTokens()
    fed.applied(0, [1, 2, 3, 7, 8])  # committed 1 2 3, drafts 7 8 fed, draft 9 not fed
    assert fed.plan([1, 2, 3, 7, 8, 9, 4], 7) == (0, [9, 4])


def test_compaction_policy() -> None:
    fed = FedTokens()
    fed.applied(0, list(range(100)))
    fed.applied(30, [])
    fed.entries = 100  # 70 live, 30 masked
    policy = CompactionPolicy(waste_fraction=0.25, min_masked=16)
    assert policy.should_compact(fed, 1, 4096)
    assert not CompactionPolicy(waste_fraction=0.5, min_masked=16).should_compact(fed, 1, 4096)
    assert CompactionPolicy(waste_fraction=0.5).should_compact(fed, 1, 100)  # context limit
    fed.compacted()
    assert fed.entries == 70 and not policy.should_compact(fed, 1, 4096)


def test_stream_mask_rewind_and_compaction() -> None:
    mask = StreamMask()
    attention, positions = mask.advance(4)
    assert attention.tolist() == [[1, 1, 1, 1]] and positions.tolist() == [[0, 1, 2, 3]]
    mask.rewind(2)
    attention, positions = mask.advance(1)
    assert attention.tolist() == [[1, 1, 0, 0, 1]] and positions.tolist() == [[2]]
    assert mask.live_indices().tolist() == [0, 1, 4]
    mask.compacted()
    attention, positions = mask.advance(300)  # grows past its first capacity
    assert attention.shape == (1, 303) and attention.all() and positions[0, 0] == 3
