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
import math
import os
from collections import deque
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Generic, TypeVar

if TYPE_CHECKING:  # the pool's machinery is imported when a pool starts: `check` on one file never starts one
    from concurrent.futures import Future

T = TypeVar("T")


def usable_cores() -> int:
    """The cores this process may use, at least 1: its CPU affinity (a container's cpuset), capped by
    its cgroup's CPU quota (a container's CPU limit), rounded up.

    ``os.cpu_count()`` counts the machine's cores, which over-subscribes a pinned CI runner; and
    affinity alone (``os.process_cpu_count()`` included) is every core of the node for a pod with a CPU
    limit but no cpuset, so an audit Job with ``limits.cpu: 2`` on a 96-core node would fork 96
    workers, each with its own memory, into a 512 MiB limit."""
    counter = getattr(os, "process_cpu_count", None)  # Python 3.13+
    if counter is not None:
        cores = max(1, counter() or 1)
    else:
        try:
            cores = max(1, len(os.sched_getaffinity(0)))
        except (AttributeError, OSError):  # not Linux
            cores = max(1, os.cpu_count() or 1)
    quota = cgroup_cpu_quota()
    return cores if quota is None else max(1, min(cores, quota))


def cgroup_cpu_quota(root: Path = Path("/sys/fs/cgroup"), membership: Path = Path("/proc/self/cgroup")) -> int | None:
    """The CPU quota of this process's cgroup and its ancestors in whole cores (rounded up), or None
    where none is set or none can be read (not Linux, no cgroup file system mounted).

    cgroup v2: ``cpu.max`` ("max 100000" or "200000 100000"); v1: ``cpu.cfs_quota_us`` (-1: none) over
    ``cpu.cfs_period_us``, under the ``cpu`` controller's mount. The process's own cgroup path is read
    from ``/proc/self/cgroup`` and walked up to the mount: a limit anywhere above applies too, and in a
    container with its own cgroup namespace the mount itself is the container's cgroup."""
    try:
        lines = membership.read_text(encoding="utf-8").splitlines()
    except OSError:
        return None
    limits: list[float] = []
    for line in lines:
        hierarchy, _, rest = line.partition(":")
        controllers, _, path = rest.partition(":")
        if hierarchy == "0" and controllers == "":
            limits += _quotas([root], path, _cpu_max)
        elif "cpu" in controllers.split(","):
            mounts = [root / name for name in ("cpu", "cpu,cpuacct", "cpuacct,cpu")]
            limits += _quotas(mounts, path, _cfs_quota)
    return math.ceil(min(limits)) if limits else None


def _quotas(mounts: list[Path], path: str, read: Callable[[Path], float | None]) -> list[float]:
    """Every quota set on ``path`` or an ancestor under the first of ``mounts`` that exists."""
    for mount in mounts:
        if not mount.is_dir():
            continue
        found: list[float] = []
        directory = mount / path.strip("/")
        while True:
            quota = read(directory)
            if quota is not None:
                found.append(quota)
            if directory == mount or mount not in directory.parents:
                return found
            directory = directory.parent
    return []


def _cpu_max(directory: Path) -> float | None:
    try:
        quota, _, period = (directory / "cpu.max").read_text(encoding="ascii").partition(" ")
        return None if quota == "max" else int(quota) / int(period)
    except (OSError, ValueError, ZeroDivisionError):
        return None


def _cfs_quota(directory: Path) -> float | None:
    try:
        quota = int((directory / "cpu.cfs_quota_us").read_text(encoding="ascii"))
        period = int((directory / "cpu.cfs_period_us").read_text(encoding="ascii"))
        return None if quota <= 0 else quota / period
    except (OSError, ValueError, ZeroDivisionError):
        return None


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


def __getattr__(name: str) -> Any:
    """``ProcessPoolExecutor`` is imported when first asked for (PEP 562), not with this module."""
    if name == "ProcessPoolExecutor":
        from concurrent.futures import ProcessPoolExecutor

        return ProcessPoolExecutor
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def _executor_class() -> Any:
    """The executor to start: the module's own attribute where one is set (a test's spy), else the real one."""
    return globals().get("ProcessPoolExecutor") or __getattr__("ProcessPoolExecutor")


def _context() -> Any:
    import multiprocessing

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
    group: int = 0,
) -> Iterator[Any]:
    """Each job's result, in the jobs' order: a :class:`Ready`'s value as is, a :class:`Task`'s return
    value as its worker computed it. At most ``window`` tasks (default ``4 * workers``) are in flight,
    and at most ``READY_PER_TASK`` times as many jobs wait in all; ``jobs`` is read lazily, only as
    far as that allows. Only tasks count towards the window: ``audit`` yields a ``Ready`` for each of
    the four in five objects its screen skips, and counted alike they filled the window behind one
    task, so the next task was not submitted until that one had finished (one worker busy of N).
    Work smaller than ``min_size`` in all (the tasks' ``size``) is done in this process (after
    ``initializer(*initargs)`` here), since a pool would only add its start-up: a CI run over ten
    small files forks nothing. ``group``: consecutive jobs go to a worker together until their tasks'
    sizes reach it (a directory of one-document files is otherwise one round trip per document,
    which costs more than judging it); each job's result still comes back on its own, and a task's
    error after the results of the jobs before it.

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
    in_flight = 0  # the Futures in ``pending``
    most = window * READY_PER_TASK
    pool = _executor_class()(workers, mp_context=_context(), initializer=initializer, initargs=initargs)
    source = _grouped(itertools.chain(head, jobs), group)
    try:
        while True:
            try:
                job = next(source)
            except StopIteration:
                break
            except Exception:  # reading ahead failed: what came before it is still reported first
                while pending:
                    yield from _results(pending.popleft())
                raise
            if isinstance(job, list):
                pending.append(pool.submit(_run_group, job))
                in_flight += 1
            else:
                pending.append(job)
            while in_flight >= window or len(pending) >= most or (pending and _done(pending[0])):
                item = pending.popleft()
                in_flight -= not isinstance(item, Ready)
                yield from _results(item)
        while pending:
            yield from _results(pending.popleft())
    finally:
        for item in pending:
            if not isinstance(item, Ready):
                item.cancel()
        pool.shutdown(wait=True, cancel_futures=True)


READY_PER_TASK = 64
"""How many jobs may wait per task of the window: results already made (a skipped object's ``None``,
a file's begin and end markers) are small, but a stream of them behind one slow task is bounded too."""


def _done(item: Future[Any] | Ready[Any]) -> bool:
    return isinstance(item, Ready) or item.done()


GROUP_PARTS = 1024
"""At most this many jobs in one group, whatever their sizes (a long run of ready results)."""


def _grouped(jobs: Iterator[Ready[Any] | Task], group: int) -> Iterator[Ready[Any] | list[Ready[Any] | Task]]:
    """The jobs as the pool sends them: a ``Ready`` that nothing waits in front of, as is; tasks, with
    the ready results between them, in lists whose tasks' sizes reach ``group`` (a task alone when
    ``group`` is 0). A read error is raised after the group read so far has been yielded."""
    parts: list[Ready[Any] | Task] = []
    size = 0
    try:
        for job in jobs:
            if isinstance(job, Task):
                parts.append(job)
                size += job.size
            elif parts:
                parts.append(job)
            else:
                yield job
                continue
            if size >= group or len(parts) >= GROUP_PARTS:
                yield parts
                parts, size = [], 0
    except Exception:
        if parts:
            yield parts
        raise
    if parts:
        yield parts


def _run_group(parts: list[Ready[Any] | Task]) -> tuple[list[Any], Exception | None]:
    """In a worker: each part's result in order, up to the first task that raises, and its error."""
    values: list[Any] = []
    for part in parts:
        if isinstance(part, Ready):
            values.append(part.value)
            continue
        try:
            values.append(part.fn(*part.args))
        except Exception as exc:
            return values, exc
    return values, None


def _results(item: Future[Any] | Ready[Any]) -> Iterator[Any]:
    if isinstance(item, Ready):
        yield item.value
        return
    values, error = item.result()
    yield from values
    if error is not None:
        raise error
