"""The ordered process pool: input order, errors at their place, and work too small for a pool."""

from __future__ import annotations

from collections.abc import Iterator

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


def test_worker_counts() -> None:
    assert usable_cores() >= 1
    assert workers_option("auto") == workers_option("0") == usable_cores()
    assert workers_option("3") == 3
