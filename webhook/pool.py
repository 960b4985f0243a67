"""An ordered, bounded process pool: ``check`` and ``audit`` judge documents on every core.

Parsing YAML and running the engine are pure CPU in Python, so threads do not help; processes do.
Three properties matter more than raw speed, and this module exists to keep them in one place:

* **input order**: results come back in the order the work went in, so the report of N workers is
  byte for byte the report of one (a CI diff, a golden file and a human all read the same text);
* **bounded memory**: at most ``window`` batches are in flight, and the reader blocks on the oldest
  one when the window is full, so a 500 MB stream never sits in a queue (memory flat in input size);
* **the same errors**: an exception raised by a task is re-raised in the caller at that task's place
  in the order, after every result before it, as the serial loop would have raised it; so is one
  raised while reading the jobs (a read error part way through a file).

Workers are forked where the platform allows it (Linux): they inherit the loaded policy and the
cluster view without pickling them, and start in milliseconds. Elsewhere the start method's default
is used, and the initializer's arguments are pickled once per worker.
"""

from __future__ import annotations

import itertools
import multiprocessing
import os
from collections import deque
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import Future, ProcessPoolExecutor
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

T = TypeVar("T")


def usable_cores() -> int:
    """The cores this process may run on (its CPU affinity, e.g. a container's cpuset), at least 1.

    ``os.cpu_count()`` counts the machine's cores, which over-subscribes a pinned CI runner."""
    counter = getattr(os, "process_cpu_count", None)  # Python 3.13+
    if counter is not None:
        return max(1, counter() or 1)
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except (AttributeError, OSError):  # not Linux
        return max(1, os.cpu_count() or 1)


def workers_option(text: str) -> int:
    """``--workers N`` for argparse: a positive count, or 0/``auto`` for every usable core."""
    import argparse

    if text.strip().lower() == "auto":
        return usable_cores()
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number of processes or 'auto', got {text!r}") from None
    if value < 0:
        raise argparse.ArgumentTypeError(f"must be at least 1 (0 or 'auto': every usable core), got {value}")
    return value or usable_cores()


@dataclass(slots=True)
class Ready(Generic[T]):
    """A result the caller already has (it needed no worker): it keeps its place in the order."""

    value: T


@dataclass(slots=True)
class Task:
    """Work for a worker: ``fn(*args)`` in a worker process; ``fn`` must be a module-level function."""

    fn: Callable[..., Any]
    args: tuple[Any, ...]
    size: int = 1  # how much work it is (e.g. documents), for ``ordered``'s ``min_size``


def _context() -> Any:
    methods = multiprocessing.get_all_start_methods()
    return multiprocessing.get_context("fork" if "fork" in methods else None)


def ordered(
    jobs: Iterable[Ready[Any] | Task],
    workers: int,
    *,
    initializer: Callable[..., None] | None = None,
    initargs: tuple[Any, ...] = (),
    window: int | None = None,
    min_size: int = 2,
) -> Iterator[Any]:
    """Each job's result, in the jobs' order: a :class:`Ready`'s value as is, a :class:`Task`'s return
    value as its worker computed it. At most ``window`` jobs (default ``4 * workers``) are pending;
    ``jobs`` is read lazily, only as far as the window allows. Work smaller than ``min_size`` in all
    (the tasks' ``size``) is done in this process (after ``initializer(*initargs)`` here), since a pool
    would only add its start-up: a CI run over ten small files forks nothing.

    The pool lives as long as the iteration: closing the generator early (``check … | head``, an
    exception in the caller) cancels what is queued and stops the workers."""
    window = window or 4 * workers
    jobs = iter(jobs)
    head: list[Ready[Any] | Task] = []
    size = 0
    failed: Exception | None = None
    try:
        for job in jobs:  # a pool costs a fork per worker: not worth it for one batch of work
            head.append(job)
            size += job.size if isinstance(job, Task) else 0
            if size >= min_size:
                break
    except Exception as exc:  # raised after the jobs read so far, as below
        failed = exc
    if size < min_size or failed is not None:
        if initializer is not None:
            initializer(*initargs)
        for job in head:
            yield job.fn(*job.args) if isinstance(job, Task) else job.value
        if failed is not None:
            raise failed
        return
    pending: deque[Future[Any] | Ready[Any]] = deque()
    pool = ProcessPoolExecutor(workers, mp_context=_context(), initializer=initializer, initargs=initargs)
    source = itertools.chain(head, jobs)
    try:
        while True:
            try:
                job = next(source)
            except StopIteration:
                break
            except Exception:  # reading ahead failed: what came before it is still reported first
                while pending:
                    yield _take(pending.popleft())
                raise
            if isinstance(job, Task):
                pending.append(pool.submit(job.fn, *job.args))
            else:
                pending.append(job)
            while len(pending) >= window or (pending and _done(pending[0])):
                yield _take(pending.popleft())
        while pending:
            yield _take(pending.popleft())
    finally:
        for item in pending:
            if isinstance(item, Future):
                item.cancel()
        pool.shutdown(wait=True, cancel_futures=True)


def _done(item: Future[Any] | Ready[Any]) -> bool:
    return not isinstance(item, Future) or item.done()


def _take(item: Future[Any] | Ready[Any]) -> Any:
    return item.value if isinstance(item, Ready) else item.result()
