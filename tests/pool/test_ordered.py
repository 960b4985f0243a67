"""The ordered process pool: input order, errors at their place, and work too small for a pool."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from webhook.pool import Ready, Task, ordered, usable_cores, workers_option


def square(x: int) -> int:
    return x * x


def fail_on(x: int, bad: int) -> int:
    if x == bad:
        raise ValueError(f"bad {x}")
    return x


def test_results_come_back_in_input_order() -> None:
    jobs: list[Ready[int] | Task] = []
    for i in range(40):
        jobs.append(Task(square, (i,)) if i % 3 else Ready(-i))
    assert list(ordered(jobs, 2, window=3)) == [i * i if i % 3 else -i for i in range(40)]


def test_a_task_error_is_raised_after_the_results_before_it() -> None:
    got: list[int] = []
    with pytest.raises(ValueError, match="bad 7"):
        for value in ordered((Task(fail_on, (i, 7)) for i in range(20)), 2):
            got.append(value)
    assert got == list(range(7))


def test_a_read_error_is_raised_after_every_job_read_before_it() -> None:
    def jobs() -> Iterator[Task]:
        for i in range(10):
            yield Task(square, (i,))
        raise OSError("disk went away")

    got: list[int] = []
    with pytest.raises(OSError, match="disk went away"):
        got.extend(ordered(jobs(), 2, window=4))
    assert got == [i * i for i in range(10)]


def test_one_task_runs_in_this_process_with_the_initializer() -> None:
    seen: list[str] = []
    out = list(ordered([Ready(1), Task(square, (3,))], 4, initializer=seen.append, initargs=("init",)))
    assert out == [1, 9] and seen == ["init"]


_MEETING: Any = None  # a worker's barrier, set by its initializer


def _meet_at(barrier: Any) -> None:
    global _MEETING
    _MEETING = barrier


def meet(x: int) -> int:
    """Returns only once another task is running at the same time (or raises after 20 s)."""
    _MEETING.wait(timeout=20)
    return x


def test_results_already_made_do_not_hold_back_the_next_task() -> None:
    """Two tasks with many Ready results between them (audit's skipped objects) run at the same time:
    each waits at a barrier that opens only when both have started, so a pool that submits the second
    only after the first has finished breaks the barrier instead of returning."""
    import multiprocessing

    barrier = multiprocessing.get_context("fork").Barrier(2)
    jobs: list[Ready[int] | Task] = [Task(meet, (1,)), *(Ready(0) for _ in range(50)), Task(meet, (2,))]
    assert list(ordered(jobs, 2, initializer=_meet_at, initargs=(barrier,))) == [1, *[0] * 50, 2]


def test_a_stream_of_ready_results_behind_a_task_is_bounded() -> None:
    """Only tasks count towards the window, but the jobs read ahead behind one are bounded too."""
    read = 0

    def jobs() -> Iterator[Ready[int] | Task]:
        nonlocal read
        yield Task(square, (3,))
        yield Task(square, (4,))
        for _ in range(10_000):
            read += 1
            yield Ready(0)

    out = ordered(jobs(), 2, window=4)
    assert next(out) == 9
    assert read < 4 * 64  # READY_PER_TASK times the window, at most, were waiting behind the first task
    assert list(out) == [16, *[0] * 10_000]


def test_small_jobs_go_to_a_worker_in_groups() -> None:
    from webhook.pool import _grouped

    jobs: list[Ready[int] | Task] = [Ready(0), Task(square, (1,)), Ready(-1), Task(square, (2,)), Task(square, (3,)),
                                     Ready(-2), Task(square, (4,), size=5), Ready(-3)]
    got = list(_grouped(iter(jobs), 2))
    assert got == [Ready(0), jobs[1:4], [jobs[4], jobs[5], jobs[6]], Ready(-3)]  # a group ends once its size is 2
    assert [[j] if isinstance(j, Task) else j for j in _grouped(iter(jobs), 0)] == [
        Ready(0), [jobs[1]], Ready(-1), [jobs[3]], [jobs[4]], Ready(-2), [jobs[6]], Ready(-3)
    ]  # no grouping: each task alone, as before


def test_grouped_jobs_keep_their_order_and_errors() -> None:
    jobs: list[Ready[int] | Task] = []
    for i in range(60):
        jobs.append(Task(fail_on, (i, 41)) if i % 4 else Ready(-i))
    got: list[int] = []
    with pytest.raises(ValueError, match="bad 41"):
        for value in ordered(jobs, 2, group=7):
            got.append(value)
    assert got == [i if i % 4 else -i for i in range(41)]  # every result before the failing task, in order
    assert list(ordered(jobs[:40], 2, group=7)) == [i if i % 4 else -i for i in range(40)]


def test_worker_counts() -> None:
    assert usable_cores() >= 1
    assert workers_option("auto") == workers_option("0") == usable_cores()
    assert workers_option("3") == 3
