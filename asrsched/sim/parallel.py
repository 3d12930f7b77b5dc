"""The study runner: one code path to fan out independent tasks (joblib locally, or a Dask cluster).

:func:`run_study` runs every study of the package -- the A/B estimator study
(:class:`asrsched.abtest.study.StudyConfig`), the A/B test of ASR policies on a fleet
(:class:`asrsched.abtest.asr_fleet.ASRStudyConfig`) and the real-engine study
(:class:`asrsched.serving.engine_study.ServingStudy`): it validates the study (nothing runs on bad
input), asks it for its :class:`StudyPlan` (one function and its tasks), runs the tasks with
:func:`run_tasks` (cache keyed by the study module's code, task order, progress, processes or Dask)
and hands the results back to the study to assemble. A study module keeps only its own model of
the experiment: its tasks and how their results become tables.

``map_tasks(fn, tasks)`` calls ``fn(**task)`` for each task dict and yields
``(task, result)`` pairs as they complete, with a tqdm progress bar.

* ``address=None``: joblib (loky processes, ``workers`` of them; ``workers=1``
  runs in-process, which is what tests and tiny runs want);
* ``address="tcp://host:8786"`` (or a ``distributed.Client``, or ``"local"`` for
  a throw-away ``LocalCluster``): the same tasks on Dask workers.

Results come back in completion order, so a caller can persist each one as it
arrives (the sweep cache does) and an interruption loses nothing already done. The
task of each pair is the caller's own dict (not a copy from the worker), so
:func:`in_task_order` can put the results back in the order of the tasks: a sum over
results is then reproducible to the last bit, whatever order they completed in.
"""

from __future__ import annotations

import hashlib
import json
import os
import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

import numpy as np
from tqdm import auto as tqdm_auto

from asrsched.sim.cache import cache_key, code_key

__all__ = [
    "map_tasks",
    "default_workers",
    "in_task_order",
    "run_tasks",
    "task_seed",
    "json_default",
    "keep_freed_memory",
    "Study",
    "StudyPlan",
    "run_study",
]


def default_workers() -> int:
    """Parallel worker processes when a caller gives none: ``$ASRSCHED_WORKERS``, else every core."""
    return int(os.environ.get("ASRSCHED_WORKERS", os.cpu_count() or 1))


def map_tasks(
    fn: Callable[..., Any],
    tasks: Iterable[dict],
    *,
    workers: int | None = None,
    address: Any = None,
    progress: bool | Callable[..., Any] = True,
    desc: str = "tasks",
) -> Iterator[tuple[dict, Any]]:
    """``progress``: show a bar (``True``), none (``False``), or a tqdm-like factory to make it with.
    The default bar is ``tqdm.auto.tqdm`` looked up at call time, so a notebook front end can
    replace it (``asrsched.figures.progress.install``)."""
    tasks = list(tasks)
    factory = progress if callable(progress) else tqdm_auto.tqdm
    bar = factory(total=len(tasks), desc=desc, disable=not progress or not tasks, leave=False)
    try:
        if address is not None:
            yield from _dask(fn, tasks, address, bar)
            return
        n = default_workers() if workers is None else int(workers)
        if n == 1 or len(tasks) <= 1:
            for t in tasks:
                r = fn(**t)
                bar.update()
                yield t, r
            return
        from joblib import Parallel, delayed

        par = Parallel(n_jobs=n, return_as="generator_unordered")
        for i, r in par(delayed(_tagged)(fn, t, i) for i, t in enumerate(tasks)):
            bar.update()
            yield tasks[i], r
    finally:
        bar.close()


def in_task_order(pairs: Iterable[tuple[dict, Any]], tasks: list[dict]) -> list[Any]:
    """The results of :func:`map_tasks` ``pairs`` in the order of ``tasks`` (the same dict objects)."""
    pos = {id(t): i for i, t in enumerate(tasks)}
    return [r for _, r in sorted(pairs, key=lambda p: pos[id(p[0])])]


def run_tasks(
    fn: Callable[..., Any],
    tasks: Iterable[dict],
    *,
    cache_dir=None,
    code: str | None = None,
    prefix: str = "task",
    workers: int | None = None,
    address: Any = None,
    progress: bool | Callable[..., Any] = True,
    desc: str = "tasks",
) -> list[Any]:
    """``fn(**task)`` of every task (:func:`map_tasks`), the results in the order of ``tasks``.

    With ``cache_dir`` each result is written as JSON as it arrives (to a temporary file, then
    renamed), as ``{prefix}-{cache_key(task, code=code)}.json``, and a task whose file exists is
    not run again. ``code`` (:func:`asrsched.sim.cache.code_key` of the calling study's module)
    is required with a cache, so that a result computed by other code is never read back. A
    result read from the cache is its JSON form (numpy values as plain ones: :func:`json_default`).
    """
    tasks = list(tasks)
    cache = Path(cache_dir) if cache_dir else None
    if cache is not None:
        if code is None:
            raise ValueError("run_tasks: cache_dir needs code= (asrsched.sim.cache.code_key of the study's module)")
        cache.mkdir(parents=True, exist_ok=True)

    def path(t: dict) -> Path:
        assert cache is not None
        return cache / f"{prefix}-{cache_key(t, code=code)}.json"

    done, todo = [], []
    for t in tasks:
        if cache is not None and path(t).exists():
            done.append((t, json.loads(path(t).read_text())))
        else:
            todo.append(t)
    for t, r in map_tasks(fn, todo, workers=workers, address=address, progress=progress, desc=desc):
        if cache is not None:
            tmp = path(t).with_suffix(f".{os.getpid()}.tmp")  # two processes may compute the same task
            tmp.write_text(json.dumps(r, default=json_default))
            tmp.rename(path(t))
        done.append((t, r))
    return in_task_order(done, tasks)


@dataclass
class StudyPlan:
    """What a study asks :func:`run_study` to run: ``fn(**task)`` for every task of ``tasks``.

    ``fn`` is a module-level function (it is sent to worker processes), defined with the study's
    class: the code of that module (and of every module it imports) keys the cache. ``prefix``
    names the cache files and ``desc`` the progress bar.
    ``one_at_a_time``: the tasks run in this process one after another (a real engine measures the
    whole machine), so ``workers`` and ``address`` are refused; ``cacheable=False`` refuses a
    ``cache_dir`` (results that are not JSON). ``progress=False`` shows no bar of the runner's own
    (the tasks show theirs). ``context``: what the study keeps between planning and assembling.
    """

    fn: Callable[..., Any]
    tasks: list[dict]
    prefix: str
    desc: str = "tasks"
    one_at_a_time: bool = False
    cacheable: bool = True
    progress: bool = True
    context: dict = field(default_factory=dict)


class Study(Protocol):
    """A study as :func:`run_study` sees it: check itself, plan its tasks, assemble their results."""

    def validate(self) -> object:
        """Raise ``ValueError`` naming the bad parameter; called before any task runs."""
        ...

    def plan(self) -> StudyPlan:
        """The study's tasks and the function that runs one."""
        ...

    def assemble(self, plan: StudyPlan, results: list[Any], seconds: float) -> Any:
        """The study's result from its tasks' ``results`` (in task order) and the wall time in seconds."""
        ...


def run_study(
    study: Study,
    *,
    workers: int | None = None,
    address: Any = None,
    cache_dir=None,
    progress: bool | Callable[..., Any] = True,
) -> Any:
    """Run a study: validate it (before any work), run its :meth:`~Study.plan`'s tasks, assemble the result.

    ``workers`` local processes (``None``: :func:`default_workers`; 1 runs in this process) or a
    Dask ``address`` (:func:`map_tasks`); with ``cache_dir`` every finished task is kept as JSON,
    keyed by its task and by the code of the study's module (:func:`~asrsched.sim.cache.code_key`), so an
    interrupted study resumes where it stopped and code that changed recomputes
    (:func:`run_tasks`). Returns what the study's :meth:`~Study.assemble` returns.
    """
    study.validate()
    t0 = time.perf_counter()
    plan = study.plan()
    name = type(study).__name__
    if plan.one_at_a_time and (address is not None or workers not in (None, 1)):
        raise ValueError(
            f"workers/address: a {name} runs its tasks one at a time in this process "
            f"(each measures the whole machine); got workers={workers!r}, address={address!r}"
        )
    if cache_dir is not None and not plan.cacheable:
        raise ValueError(
            f"cache_dir: a {name} keeps no cache (its results are files, written to its out_dir); got {cache_dir!r}"
        )
    code = code_key(type(study).__module__) if cache_dir is not None else None
    results = run_tasks(
        plan.fn,
        plan.tasks,
        cache_dir=cache_dir,
        code=code,
        prefix=plan.prefix,
        workers=1 if plan.one_at_a_time else workers,
        address=address,
        progress=progress if plan.progress else False,
        desc=plan.desc,
    )
    return study.assemble(plan, results, time.perf_counter() - t0)


def task_seed(*parts, digest_size: int = 4) -> int:
    """The seed of one task: a blake2b hash of ``parts`` (``digest_size`` bytes; stable across runs and processes)."""
    return int.from_bytes(hashlib.blake2b(repr(parts).encode(), digest_size=digest_size).digest(), "little")


def json_default(o):
    """``json.dumps(..., default=json_default)``: numpy scalars and arrays as plain JSON values."""
    if isinstance(o, (np.floating, np.integer)):
        return o.item()
    if isinstance(o, np.bool_):
        return bool(o)
    if isinstance(o, np.ndarray):
        return o.tolist()
    raise TypeError(type(o))


_HEAP_KEPT = False


def keep_freed_memory() -> None:
    """Let glibc keep freed large blocks in the heap (once per process; Linux/glibc only, else no-op).

    Each experiment allocates ~40 MB of per-job arrays; by default glibc returns blocks over
    128 kB to the OS on free, so the next experiment page-faults all of it again (~5k faults,
    about 20 % of a 500k-job simulation). Raising the mmap and trim thresholds keeps them.
    """
    global _HEAP_KEPT
    if _HEAP_KEPT:
        return
    _HEAP_KEPT = True
    try:
        import ctypes

        libc = ctypes.CDLL("libc.so.6")
        libc.mallopt(-3, 1 << 30)  # M_MMAP_THRESHOLD: serve blocks up to 1 GiB from the heap
        libc.mallopt(-1, (1 << 31) - 1)  # M_TRIM_THRESHOLD: never trim the heap top back to the OS
    except (OSError, AttributeError):
        pass


def _tagged(fn: Callable[..., Any], task: dict, i: int) -> tuple[int, Any]:
    return i, fn(**task)


def _dask(fn, tasks, address, bar):
    from distributed import Client, LocalCluster, as_completed

    owned = []
    if isinstance(address, Client):
        client = address
    elif address == "local":
        cluster = LocalCluster(n_workers=2, threads_per_worker=1, processes=True, dashboard_address=None)
        client = Client(cluster)
        owned = [client, cluster]
    else:
        client = Client(address)
        owned = [client]
    try:
        futs = {client.submit(_tagged, fn, t, i, pure=False): i for i, t in enumerate(tasks)}
        for fut in as_completed(futs):
            i, r = fut.result()
            bar.update()
            yield tasks[i], r
    finally:
        for o in owned:
            o.close()
