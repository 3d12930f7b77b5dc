"""One code path to fan out independent tasks: joblib locally, or a Dask cluster.

``map_tasks(fn, tasks)`` calls ``fn(**task)`` for each task dict and yields
``(task, result)`` pairs as they complete, with a tqdm progress bar.

* ``address=None``: joblib (loky processes, ``n_jobs`` workers; ``n_jobs=1``
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

import os
from collections.abc import Callable, Iterable, Iterator
from typing import Any

from tqdm import auto as tqdm_auto

__all__ = ["map_tasks", "default_n_jobs", "in_task_order"]


def default_n_jobs() -> int:
    return int(os.environ.get("ASRSCHED_N_JOBS", os.cpu_count() or 1))


def map_tasks(
    fn: Callable[..., Any],
    tasks: Iterable[dict],
    *,
    n_jobs: int | None = None,
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
        n = default_n_jobs() if n_jobs is None else int(n_jobs)
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
