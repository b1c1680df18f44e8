"""The dashboard's charts, as issue 26 found them: lines drawn straight across idle gaps, a
stream's tokens/s spiking to ~15,000 when the real rate was ~200, and a second chat after the
first labelled "stream 2".

The spike's cause: a route that chains decode steps itself (``LocalRoute.decode``) queues the
steps it finishes while the event loop is busy (the GUI painting); the loop then takes several
in a row, and the feed read one token over the few microseconds between two of them as the
stream's rate. The real app shows it with a GUI that takes 10 ms per reply piece.
"""

from __future__ import annotations

import asyncio
import math
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from clock_support import FakeClock

pytest.importorskip("PySide6")
pytest.importorskip("qasync")

from app_support import TIMEOUT_MS, QtBot, make_window

from fleetgui.app.dashboard.metrics_feed import AGGREGATE, MetricsFeed
from fleetgui.app.dashboard.metrics_series import (
    ACCEPTANCE,
    BATCH,
    CHOSEN_K,
    STAGE_MS,
    TOKENS_PER_S,
    ChartSpec,
    SeriesStore,
)
from fleetgui.app.dashboard.rates import RateMeter
from fleetgui.app.dashboard.stream_labels import StreamLabels
from fleetgui.app.views.dashboard_view import DashboardView
from fleetgui.generation_config import GenerationConfig
from fleetgui.runtime.metrics import PassBatched, RequestFinished, TokensEmitted


def finished(stream: int) -> RequestFinished:
    return RequestFinished(stream, 5, 10, 50.0, 0.0, None, "eos")


def test_the_streams_each_pass_carried_are_charted(qapp: Any) -> None:
    clock = FakeClock()
    feed = MetricsFeed(clock=clock)
    for streams in (1, 4, 8):
        clock.now += 0.01
        feed.record(PassBatched(streams, tokens=streams + 20, prefill_tokens=20))
    (series,) = feed.store.series(BATCH)
    assert [y for y in series.y if not math.isnan(y)] == [1.0, 4.0, 8.0]


# -- tokens/s -----------------------------------------------------------------------------------


def test_steps_taken_in_bursts_chart_the_stream_at_its_real_rate(qapp: Any) -> None:
    """200 tokens/s whose steps reach the loop ten at a time every 50 ms, each "taking" the
    0.05 ms the pipeline measured between two queued steps."""
    clock = FakeClock(0.0)
    feed = MetricsFeed(clock=clock)
    feed.name_stream(1, "conversation-a", "Tell me a story")
    for burst in range(60):
        clock.now = 0.5 + burst * 0.05
        for _ in range(10):
            feed.record(TokensEmitted(1, 1, 0.05))
            clock.now += 0.00005
    chat = feed.store.get(TOKENS_PER_S, "Tell me a story")
    total = feed.store.get(TOKENS_PER_S, AGGREGATE)
    assert chat is not None and total is not None and chat.points > 20
    for series in (chat, total):
        rates = [y for y in series.y if not math.isnan(y)]
        assert min(rates) > 150 and max(rates) < 260, (series.name, min(rates), max(rates))


def test_the_replies_of_one_chat_share_its_line_broken_between_them(qapp: Any) -> None:
    clock = FakeClock(0.0)
    feed = MetricsFeed(clock=clock)
    ends = []
    for stream in (1, 2):  # a reply, then the next one in the same chat a second later
        feed.name_stream(stream, "conversation-a", "Tell me a story")
        for _ in range(20):
            clock.now += 0.05
            feed.record(TokensEmitted(stream, 1, 50.0))
        feed.record(finished(stream))
        ends.append(clock.now)
        clock.now += 1.0
    line = feed.store.get(TOKENS_PER_S, "Tell me a story")
    assert line is not None
    breaks = [i for i, y in enumerate(line.y) if math.isnan(y)]
    assert len(breaks) == 1 and line.x[breaks[0] - 1] <= ends[0] < line.x[breaks[0] + 1]
    assert [s.name for s in feed.store.series(TOKENS_PER_S)] == ["Tell me a story", AGGREGATE]


def test_a_reply_too_short_for_a_running_rate_is_charted_when_it_ends(qapp: Any) -> None:
    clock = FakeClock(0.0)
    feed = MetricsFeed(clock=clock)
    for _ in range(9):  # the first token, then 8 more over 0.1 s: 80 tokens/s
        feed.record(TokensEmitted(7, 1, 12.5))
        clock.now += 0.0125
    assert feed.store.series(TOKENS_PER_S) == []  # too short to say while it ran
    feed.record(finished(7))
    for name in ("reply 1", AGGREGATE):
        series = feed.store.get(TOKENS_PER_S, name)
        assert series is not None and list(series.y) == [pytest.approx(80.0)], name


def test_a_rate_needs_a_quarter_second_and_leaves_the_first_token_out() -> None:
    meter = RateMeter()
    assert meter.add(0.0, 1) is None  # the first token: its time was the prompt's
    assert meter.add(0.0001, 5) is None  # a burst right after it is no rate yet
    assert meter.add(0.5, 5) == pytest.approx(10 / 0.5)
    for i in range(1, 41):  # then 20 tokens/s for 4 s: the window slides
        rate = meter.add(0.5 + i * 0.1, 2)
    assert rate == pytest.approx(20.0)


# -- stream names -------------------------------------------------------------------------------


def test_streams_are_named_by_their_chat_or_by_the_first_free_reply_number() -> None:
    labels = StreamLabels(stale_s=30.0)
    assert (
        labels.name(1, "c1", "Write a poem about the sea, with rhymes")
        == "Write a poem about the sea…"
    )
    labels.end(1)
    assert labels.name(2, "c2", "Hello") == "Hello"  # the second chat is not "stream 2"
    assert labels.name(3, "c1", "renamed since") == "Write a poem about the sea…"  # same chat
    assert labels.name(4, "c3", "Hello") == "Hello (2)"  # another chat of the same title
    # unnamed streams (the API): one after another is "reply 1" each time, at once 1 and 2
    assert labels.label(10, now=0.0) == "reply 1"
    labels.end(10)
    assert labels.label(11, now=1.0) == "reply 1"
    assert labels.label(12, now=1.0) == "reply 2"
    assert labels.label(13, now=40.0) == "reply 1"  # 11 and 12 went silent (stopped)


# -- idle gaps ----------------------------------------------------------------------------------


def test_a_series_breaks_where_it_was_idle_and_nowhere_else() -> None:
    store = SeriesStore()
    for i in range(10):
        store.add(STAGE_MS, "stage 0", i * 0.1, 5.0)
    for i in range(10):
        store.add(STAGE_MS, "stage 0", 20 + i * 0.1, 7.0)  # after 19 s of nothing
    for i in range(10):
        store.add(STAGE_MS, "slow", i * 8.0, 1.0)  # a point every 8 s is a line, not dots
    fast = store.get(STAGE_MS, "stage 0")
    slow = store.get(STAGE_MS, "slow")
    assert fast is not None and slow is not None
    breaks = [i for i, y in enumerate(fast.y) if math.isnan(y)]
    assert breaks == [10] and fast.points == 20
    assert sum(map(math.isnan, slow.y)) <= 1  # at most after the first point: nothing known yet
    assert not any(math.isnan(y) for y in list(slow.y)[3:])
    assert store.total_points() == 30
    assert len(store.to_csv().splitlines()) == 31  # breaks are not data


def test_the_chart_draws_no_line_across_an_idle_gap(qtbot: QtBot) -> None:
    """What the chart's curve would paint (its path; not painted here: under PySide6 6.12 each
    paint of a pyqtgraph item leaks a reference, see the report)."""
    store = SeriesStore()
    for i in range(11):
        store.add(STAGE_MS, "stage 0", i * 0.1, 5.0)  # 0 .. 1 s
    for i in range(11):
        store.add(STAGE_MS, "stage 0", 9 + i * 0.1, 5.0)  # 9 .. 10 s, after an idle gap
    view = DashboardView()
    qtbot.addWidget(view)
    view.show_series(store)
    path = view.curves[(STAGE_MS.key, "stage 0")].curve.getPath()
    pieces = path.toSubpathPolygons()
    spans = sorted((min(p.x() for p in poly), max(p.x() for p in poly)) for poly in pieces)
    assert spans == [(0.0, pytest.approx(1.0)), (9.0, pytest.approx(10.0))]


def test_a_chat_has_one_colour_on_every_chart(qtbot: QtBot) -> None:
    """Issue 39: each chart coloured its lines in the order it met them, so a chat charted
    after "all streams" on tokens/s but first on acceptance had two colours."""
    store = SeriesStore()
    store.add(TOKENS_PER_S, AGGREGATE, 0.0, 100.0)  # the all-streams rate comes first here
    for chart in (TOKENS_PER_S, ACCEPTANCE, CHOSEN_K):
        for chat in ("Tell me a story", "Write a function"):
            store.add(chart, chat, 0.5, 1.0)
    view = DashboardView()
    qtbot.addWidget(view)
    view.show_series(store)

    def color(chart: ChartSpec, name: str) -> str:
        return str(view.curves[(chart.key, name)].opts["pen"].color().name())

    for chat in ("Tell me a story", "Write a function"):
        assert len({color(chart, chat) for chart in (TOKENS_PER_S, ACCEPTANCE, CHOSEN_K)}) == 1
    assert color(ACCEPTANCE, "Tell me a story") != color(ACCEPTANCE, "Write a function")
    assert color(TOKENS_PER_S, AGGREGATE) not in {
        color(TOKENS_PER_S, chat) for chat in ("Tell me a story", "Write a function")
    }
    view.apply_theme()  # a theme change recolours them alike
    assert color(TOKENS_PER_S, "Write a function") == color(CHOSEN_K, "Write a function")


# -- the real app -------------------------------------------------------------------------------


def test_two_chats_are_charted_under_their_titles_at_their_real_rate(
    qtbot: QtBot,
    qloop: asyncio.AbstractEventLoop,
    tiny_export: Callable[..., Path],
    tmp_path: Path,
) -> None:
    export_1s = tiny_export(1)
    core, window = make_window(tmp_path)
    qtbot.addWidget(window)
    with qtbot.waitSignal(core.deployment.deployed, timeout=TIMEOUT_MS):
        core.deployment.choose_model(export_1s)
        core.deployment.deploy()
    qtbot.waitUntil(lambda: core.deployment.state.value == "idle", timeout=TIMEOUT_MS)

    def slow_gui(_: str, __: str) -> None:
        time.sleep(0.01)  # a GUI that takes 10 ms per reply piece: the steps queue meanwhile

    rates: list[float] = []
    core.inference.finished.connect(lambda _, result: rates.append(result.tokens_per_s))
    core.chats.reply_delta.connect(slow_gui)
    titles = []
    for text in ("Once upon a time", "The quick brown fox"):
        conversation = core.chats.new_conversation(GenerationConfig(max_new_tokens=80))
        with qtbot.waitSignal(core.chats.reply_finished, timeout=TIMEOUT_MS):
            assert core.chats.send(conversation, text)
        titles.append(core.chats.get(conversation).title)
    core.chats.reply_delta.disconnect(slow_gui)
    names = [s.name for s in core.feed.store.series(TOKENS_PER_S)]
    assert sorted(names) == sorted([*titles, AGGREGATE])  # no "stream 2"
    real = max(rates)
    for series in core.feed.store.series(TOKENS_PER_S):
        charted = [y for y in series.y if not math.isnan(y)]
        assert charted and max(charted) < 1.5 * real, (series.name, max(charted), real)
    qtbot.waitUntil(lambda: (TOKENS_PER_S.key, titles[1]) in window.dashboard.curves)
    window.close()
