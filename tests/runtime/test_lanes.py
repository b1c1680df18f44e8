"""StageLanes: one job at a time per lane, in order; follow-ups that go on without a wake-up
when they can and on another thread when two lanes have work; lanes that outlive a failing job
and finish what is under way when closed."""

from __future__ import annotations

import threading
import time

import pytest

from fleetgui.runtime.lanes import Job, LanesClosedError, StageLanes


def wait_for(event: threading.Event) -> None:
    assert event.wait(10), "the lanes never ran the job"


def test_a_lanes_jobs_run_one_at_a_time_in_arrival_order() -> None:
    lanes = StageLanes(2)
    order: list[int] = []
    running = 0
    overlapped = False
    done = threading.Event()

    def job(i: int) -> Job:
        def run() -> None:
            nonlocal running, overlapped
            running += 1
            overlapped |= running > 1
            time.sleep(0.001)
            order.append(i)
            running -= 1
            if i == 29:
                done.set()

        return run

    for i in range(30):
        lanes.submit(1, job(i))
    wait_for(done)
    lanes.close()
    assert order == list(range(30))
    assert not overlapped


def test_a_follow_up_to_an_idle_lane_goes_on_on_the_same_thread() -> None:
    lanes = StageLanes(3)
    threads: list[tuple[int, int]] = []
    done = threading.Event()

    def step(lane: int, left: int) -> Job:
        def run() -> tuple[int, Job] | None:
            threads.append((lane, threading.get_ident()))
            if left == 0:
                done.set()
                return None
            return (lane + 1) % 3, step((lane + 1) % 3, left - 1)

        return run

    lanes.submit(0, step(0, 11))
    wait_for(done)
    lanes.close()
    assert [lane for lane, _ in threads] == [i % 3 for i in range(12)]
    assert len({thread for _, thread in threads}) == 1


def test_a_follow_up_wakes_another_thread_when_both_lanes_have_work() -> None:
    """The first lane still has a job queued when its first job hands one to the idle second
    lane: the two must then run at the same time (the barrier needs both)."""
    lanes = StageLanes(2)
    meet = threading.Barrier(2, timeout=10)
    threads: dict[str, int] = {}
    done = threading.Event()

    def arrive(name: str) -> None:
        threads[name] = threading.get_ident()
        meet.wait()

    def on_lane_1() -> None:
        arrive("lane 1")
        done.set()

    def first() -> tuple[int, Job]:
        lanes.submit(0, lambda: arrive("lane 0, second job"))
        return 1, on_lane_1

    lanes.submit(0, first)
    wait_for(done)
    lanes.close()
    assert threads["lane 1"] != threads["lane 0, second job"]


def test_a_failing_job_leaves_its_lane_serving() -> None:
    lanes = StageLanes(1)
    done = threading.Event()

    def fail() -> None:
        raise RuntimeError("boom")

    lanes.submit(0, fail)
    lanes.submit(0, done.set)
    wait_for(done)
    lanes.close()


def test_closed_lanes_refuse_new_jobs_and_finish_the_ones_under_way() -> None:
    """Closing shuts the pool down: a hand-off that would wake a thread runs on the handing
    thread instead, after its own lane's queue."""
    lanes = StageLanes(2)
    started, release = threading.Event(), threading.Event()
    ran: list[str] = []
    finished = threading.Event()

    def first() -> tuple[int, Job]:
        started.set()
        release.wait(10)
        return 1, lambda: (ran.append("handed on"), finished.set())

    lanes.submit(0, first)
    lanes.submit(0, lambda: ran.append("queued before close"))
    wait_for(started)
    lanes.close()
    with pytest.raises(LanesClosedError, match="closed"):
        lanes.submit(0, lambda: None)
    release.set()
    wait_for(finished)
    assert ran == ["queued before close", "handed on"]


def test_lanes_need_a_stage() -> None:
    with pytest.raises(ValueError, match="at least one"):
        StageLanes(0)
