"""Scheduling policies: FCFS, SJF, HRRN, LJF, random, adaptive — behind one registry.

A policy is a *waiting queue*: jobs go in with :meth:`WaitingQueue.push`, and the
scheduler takes the next one with :meth:`WaitingQueue.pop`. The contract, shared by
the simulator, our HTTP server and the vLLM scheduler plug-in:

* ``peek(now)`` names the job ``pop(now)`` will return at the same ``now`` (vLLM's
  admission loop peeks, tries to allocate, then pops and expects the same request);
* ``remove(job)`` takes a job out wherever it is (aborts, client disconnects);
* ``len(q)``, ``bool(q)`` and ``iter(q)`` (arbitrary order) behave as for a list.

One shared notion of job: :class:`Job` (arrival time and size estimate).

A user-defined policy takes a few lines::

    >>> from asrsched.core.policies import register_policy, KeyQueue, make_queue, Job
    >>> @register_policy("lifo")
    ... def lifo():
    ...     return KeyQueue(lambda job: -job.arrival)
    >>> q = make_queue("lifo")
    >>> for i in range(3):
    ...     q.push(Job(rid=i, arrival=float(i), est_service=1.0))
    >>> q.pop(now=5.0).rid
    2
    >>> from asrsched.core.policies import POLICIES
    >>> _ = POLICIES.pop("lifo")  # (keep the registry as shipped)

Keys may also depend on the clock (``KeyQueue(key, dynamic=True)`` with
``key(job, now)``); those are re-ranked by a scan at each decision.
"""

from __future__ import annotations

import heapq
import itertools
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from asrsched.core.rulebook import fcfs_argmin, hrrn_argbest

__all__ = [
    "Job",
    "WaitingQueue",
    "KeyQueue",
    "HRRNQueue",
    "AdaptiveQueue",
    "RandomQueue",
    "POLICIES",
    "register_policy",
    "make_queue",
    "policy_names",
    "allowed_policies_text",
    "validate_policies",
    "POLICY_FAMILIES",
]


@dataclass(slots=True, eq=False)
class Job:
    """A request as a scheduler sees it.

    ``est_service`` is the estimated service time S in seconds (from
    :class:`asrsched.core.service.ServiceModel`), the only size a policy may use.
    ``duration`` is the audio duration in seconds; ``payload`` carries anything
    the caller needs back (a vLLM request, an HTTP handler's future, ...); ``priority`` is the request's
    class (lower first, as vLLM's; only the class policies of :mod:`asrsched.core.priority` read it).
    """

    rid: int
    arrival: float
    est_service: float
    duration: float = 0.0
    language: str = "en"
    payload: Any = field(default=None, repr=False)
    priority: int = 0


class WaitingQueue:
    """Interface of a policy-ordered waiting queue (see module docstring)."""

    name = "abstract"

    def push(self, job: Job) -> None:  # pragma: no cover - interface
        raise NotImplementedError

    def peek(self, now: float) -> Job:  # pragma: no cover - interface
        raise NotImplementedError

    def pop(self, now: float) -> Job:  # pragma: no cover - interface
        raise NotImplementedError

    def remove(self, job: Job) -> bool:  # pragma: no cover - interface
        raise NotImplementedError

    def __len__(self) -> int:  # pragma: no cover - interface
        raise NotImplementedError

    def __bool__(self) -> bool:
        return len(self) > 0

    def __iter__(self) -> Iterator[Job]:  # pragma: no cover - interface
        raise NotImplementedError

    def _empty(self) -> IndexError:
        return IndexError(f"pop/peek from an empty {self.name} queue")


class KeyQueue(WaitingQueue):
    """Serve the job with the smallest ``key``; ties go to the earlier push (FCFS).

    Static keys (``key(job)``) live in a binary heap with lazy deletion: push,
    peek and pop are O(log n). Dynamic keys (``key(job, now)``, ``dynamic=True``)
    are evaluated over the whole queue at each decision (O(n)). A job removed and
    pushed again ranks as a new push (its old heap entry is dead, not revived).

    ``count_clock=True`` ranks a static key on the push count: a job's heap key is ``key(job) + p``
    with ``p`` the number of pushes into this queue before it (0, 1, 2, ...), so a key is an offset
    in places of the arrival order (Nudge-M's order, :mod:`asrsched.core.nudge`).
    """

    def __init__(self, key: Callable[..., Any], *, dynamic: bool = False, name: str = "key", count_clock: bool = False):
        if dynamic and count_clock:
            raise ValueError("count_clock: a dynamic key cannot run on the push count")
        self.key = key
        self.dynamic = dynamic
        self.count_clock = bool(count_clock)
        self.name = name
        self._heap: list[tuple[Any, int, Job]] = []
        self._live: dict[int, Job] = {}  # id(job) -> job
        self._entry: dict[int, int] = {}  # id(job) -> push number of its live heap entry
        self._seq = itertools.count()
        self._peeked: tuple[float, Job] | None = None

    def push(self, job: Job) -> None:
        self._live.pop(id(job), None)  # a re-push goes to the end of the push order
        self._live[id(job)] = job
        seq = self._entry[id(job)] = next(self._seq)
        if self.dynamic:
            self._heap.append((None, seq, job))
        else:
            k = self.key(job)
            heapq.heappush(self._heap, (k + seq if self.count_clock else k, seq, job))
        self._peeked = None

    def _alive(self, entry: tuple[Any, int, Job]) -> bool:
        return self._entry.get(id(entry[2])) == entry[1]

    def _clean_top(self) -> None:
        heap = self._heap
        while heap and not self._alive(heap[0]):
            heapq.heappop(heap)

    def peek(self, now: float) -> Job:
        if not self._live:
            raise self._empty()
        if self.dynamic:
            if self._peeked is not None and self._peeked[0] == now and id(self._peeked[1]) in self._live:
                return self._peeked[1]
            self._heap = [e for e in self._heap if self._alive(e)]
            best = min(self._heap, key=lambda e: (self.key(e[2], now), e[1]))[2]
            self._peeked = (now, best)
            return best
        self._clean_top()
        return self._heap[0][2]

    def pop(self, now: float) -> Job:
        job = self.peek(now)
        del self._live[id(job)]
        del self._entry[id(job)]
        self._peeked = None
        if not self.dynamic:
            heapq.heappop(self._heap)
        return job

    def remove(self, job: Job) -> bool:
        self._peeked = None
        self._entry.pop(id(job), None)
        return self._live.pop(id(job), None) is not None

    def __len__(self) -> int:
        return len(self._live)

    def __iter__(self) -> Iterator[Job]:
        return iter(list(self._live.values()))


class HRRNQueue(WaitingQueue):
    """Highest response ratio next: serve the largest ``(W + S) / S``.

    ``W = now - arrival`` grows while a job waits, so the order changes with the
    clock. The queue keeps arrivals and sizes in contiguous numpy arrays
    (swap-remove, amortised O(1) push) and ranks lazily with one pass of the rulebook's
    compiled scan per decision (:func:`asrsched.core.rulebook.hrrn_argbest`, the one the
    compiled engine runs; ``benchmarks/bench_vllm_queue.py`` measures it per depth). Ties go to
    the earliest arrival, then to the earliest push
    (a push counter travels with each slot, since swap-remove reorders slots), so
    with equal sizes HRRN reduces to FCFS in submission order. ``peek(now)`` caches
    its answer so that ``pop(now)`` returns exactly the peeked job. ``iter(q)``
    yields the waiting jobs in push order.
    """

    name = "hrrn"

    def __init__(self, min_service: float = 1e-6):
        self.min_service = float(min_service)
        self._arr = np.empty(64)
        self._inv = np.empty(64)  # 1 / S
        self._seq = np.empty(64, np.int64)  # push order, the last tie-break
        self._count = 0
        self._jobs: list[Job] = []
        self._pos: dict[int, int] = {}
        self._peeked: tuple[float, int] | None = None

    def push(self, job: Job) -> None:
        n = len(self._jobs)
        if n == self._arr.shape[0]:
            self._arr = np.resize(self._arr, 2 * n)
            self._inv = np.resize(self._inv, 2 * n)
            self._seq = np.resize(self._seq, 2 * n)
        self._arr[n] = job.arrival
        self._inv[n] = 1.0 / max(job.est_service, self.min_service)
        self._seq[n] = self._count
        self._count += 1
        self._jobs.append(job)
        self._pos[id(job)] = n
        self._peeked = None

    def ratios(self, now: float) -> np.ndarray:
        """Response ratios ``1 + W/S`` of the waiting jobs (in internal order)."""
        n = len(self._jobs)
        return 1.0 + (now - self._arr[:n]) * self._inv[:n]

    def _argbest(self, now: float) -> int:
        n = len(self._jobs)
        if n == 0:
            raise self._empty()
        if self._peeked is not None and self._peeked[0] == now:
            return self._peeked[1]
        best = hrrn_argbest(self._arr, self._inv, self._seq, 0, n, now)
        self._peeked = (now, best)
        return best

    def peek(self, now: float) -> Job:
        return self._jobs[self._argbest(now)]

    def _first_pushed(self) -> int:
        """Slot of the earliest (arrival, push) job: FCFS over a few waiting jobs (a scan)."""
        n = len(self._jobs)
        if n == 0:
            raise self._empty()
        return fcfs_argmin(self._arr, self._seq, 0, n)

    def _take(self, i: int) -> Job:
        jobs = self._jobs
        job = jobs[i]
        last = len(jobs) - 1
        if i != last:
            moved = jobs[last]
            jobs[i] = moved
            self._arr[i] = self._arr[last]
            self._inv[i] = self._inv[last]
            self._seq[i] = self._seq[last]
            self._pos[id(moved)] = i
        jobs.pop()
        del self._pos[id(job)]
        self._peeked = None
        return job

    def pop(self, now: float) -> Job:
        return self._take(self._argbest(now))

    def remove(self, job: Job) -> bool:
        i = self._pos.get(id(job))
        if i is None:
            return False
        self._take(i)
        return True

    def __len__(self) -> int:
        return len(self._jobs)

    def __iter__(self) -> Iterator[Job]:
        jobs = self._jobs
        return iter([jobs[i] for i in np.argsort(self._seq[: len(jobs)], kind="stable")])


class RandomQueue(WaitingQueue):
    """Serve a uniformly random waiting job (a sanity reference); seeded."""

    name = "random"

    def __init__(self, seed: int = 0):
        self._rng = np.random.default_rng(seed)
        self._jobs: list[Job] = []
        self._pos: dict[int, int] = {}
        self._peeked: int | None = None

    def push(self, job: Job) -> None:
        self._pos[id(job)] = len(self._jobs)
        self._jobs.append(job)
        self._peeked = None

    def peek(self, now: float) -> Job:
        if not self._jobs:
            raise self._empty()
        if self._peeked is None:
            self._peeked = int(self._rng.integers(len(self._jobs)))
        return self._jobs[self._peeked]

    def _take(self, i: int) -> Job:
        jobs = self._jobs
        job, last = jobs[i], jobs[-1]
        jobs[i] = last
        self._pos[id(last)] = i
        jobs.pop()
        del self._pos[id(job)]
        self._peeked = None
        return job

    def pop(self, now: float) -> Job:
        self.peek(now)
        return self._take(self._peeked)  # type: ignore[arg-type]  # peek() set it

    def remove(self, job: Job) -> bool:
        i = self._pos.get(id(job))
        if i is None:
            return False
        self._take(i)
        return True

    def __len__(self) -> int:
        return len(self._jobs)

    def __iter__(self) -> Iterator[Job]:
        return iter(list(self._jobs))


class AdaptiveQueue(WaitingQueue):
    """Switch between FCFS, SJF and HRRN from the queue depth and a live starvation indicator.

    The study names this as future work. The starvation indicator is the largest
    response ratio ``(W + S) / S`` among the waiting jobs — the slowdown the most
    starved job would see if served now. Rule, evaluated at each decision:

    * depth ``< low_depth`` → **FCFS** (little head-of-line blocking to remove,
      and FCFS is the fairest order);
    * otherwise, if the largest response ratio exceeds ``ratio_cap`` → **HRRN**
      (starvation is building: serve the most starved job);
    * otherwise → **SJF** (deep queue, nobody starving: cut median latency).

    ``ratio_cap`` slides the policy along the P50-versus-P90 trade-off between
    SJF (``ratio_cap = inf``) and HRRN (``ratio_cap = 1``). The SJF heap and the
    HRRN arrays are kept at once, so a mode switch costs nothing; FCFS, used only
    below ``low_depth`` jobs, is a scan of those few.
    ``mode_counts`` records how often each mode decided.
    """

    name = "adaptive"

    def __init__(self, low_depth: int = 4, ratio_cap: float = 50.0):
        if low_depth < 0 or not ratio_cap >= 1:
            raise ValueError(
                f"adaptive policy needs low_depth >= 0 and ratio_cap >= 1, got "
                f"low_depth={low_depth!r}, ratio_cap={ratio_cap!r}"
            )
        self.low_depth = int(low_depth)
        self.ratio_cap = float(ratio_cap)
        self._hrrn = HRRNQueue()  # the waiting jobs, their push order and the HRRN order
        self.min_service = self._hrrn.min_service  # the floor on S in the response ratio
        # SJF: a heap of (est, arrival, push number, job) with lazy deletion, one tuple per push (a deep
        # queue's decisions are dominated by allocation and the garbage collector, not by the heap)
        self._heap: list[tuple[float, float, int, Job]] = []
        self._live: dict[int, int] = {}  # id(job) -> push number of its live heap entry
        self._count = itertools.count()
        self.mode_counts = {"fcfs": 0, "sjf": 0, "hrrn": 0}
        self._peeked: tuple[float, str, Job, int] | None = None  # (now, mode, job, HRRN slot or -1)

    def _ratio_mode(self, now: float) -> tuple[str, int]:
        """The mode at ``now`` and the HRRN slot of the most starved job (-1 below ``low_depth``)."""
        hq = self._hrrn
        if len(hq._jobs) < self.low_depth:
            return "fcfs", -1
        b = hq._argbest(now)
        top = hq._jobs[b]
        ratio = 1.0 + (now - top.arrival) / max(top.est_service, self.min_service)
        return ("hrrn" if ratio > self.ratio_cap else "sjf"), b

    def mode(self, now: float) -> str:
        """The order the next decision at ``now`` will use."""
        return self._ratio_mode(now)[0]

    def push(self, job: Job) -> None:
        seq = next(self._count)
        heapq.heappush(self._heap, (job.est_service, job.arrival, seq, job))
        self._live[id(job)] = seq
        self._hrrn.push(job)
        self._peeked = None

    def _sjf_top(self) -> Job:
        heap, live = self._heap, self._live
        while live.get(id(heap[0][3])) != heap[0][2]:  # dead entries (jobs taken by another mode) leave here
            heapq.heappop(heap)
        return heap[0][3]

    def peek(self, now: float) -> Job:
        if not self._hrrn._jobs:
            raise self._empty()
        if self._peeked is None or self._peeked[0] != now:
            mode, slot = self._ratio_mode(now)
            if mode == "fcfs":  # fewer than low_depth jobs: a scan is the cheapest FCFS
                slot = self._hrrn._first_pushed()
                job = self._hrrn._jobs[slot]
            elif mode == "hrrn":
                job = self._hrrn._jobs[slot]
            else:
                job, slot = self._sjf_top(), -1
            self._peeked = (now, mode, job, slot)
        return self._peeked[2]

    def pop(self, now: float) -> Job:
        pk = self._peeked
        if pk is None or pk[0] != now:
            self.peek(now)
            pk = self._peeked
        _, mode, job, slot = pk  # type: ignore[misc]  # peek() set it
        self.mode_counts[mode] += 1
        self._peeked = None
        del self._live[id(job)]
        if mode == "sjf":
            heapq.heappop(self._heap)  # the top is the live entry _sjf_top found
            self._hrrn.remove(job)
        else:
            self._hrrn._take(slot)
            self._compact()
        return job

    def _compact(self) -> None:
        """Drop the dead heap entries once they outnumber the live ones (bounded memory, amortised O(1))."""
        if len(self._heap) > 2 * len(self._live) + 64:
            live = self._live
            self._heap = [e for e in self._heap if live.get(id(e[3])) == e[2]]
            heapq.heapify(self._heap)

    def remove(self, job: Job) -> bool:
        self._peeked = None
        found = self._hrrn.remove(job)
        if found:
            del self._live[id(job)]
            self._compact()
        return found

    def __len__(self) -> int:
        return len(self._hrrn)

    def __iter__(self) -> Iterator[Job]:
        return iter(self._hrrn)


# ----------------------------------------------------------------------------- registry

POLICIES: dict[str, Callable[..., WaitingQueue]] = {}


def register_policy(name: str) -> Callable[[Callable[..., WaitingQueue]], Callable[..., WaitingQueue]]:
    """Decorator: register a factory ``(**params) -> WaitingQueue`` under ``name``."""

    def deco(factory: Callable[..., WaitingQueue]) -> Callable[..., WaitingQueue]:
        POLICIES[name.lower()] = factory
        return factory

    return deco


#: parameterised policy families, registered on first use of a name ``<prefix><parameter>``:
#: prefix -> "module:function" taking the parameter as written (e.g. ``gamma_boost_0.5``)
POLICY_FAMILIES: dict[str, str] = {
    "gamma_boost_": "asrsched.core.gamma_boost:gamma_boost_from_name",
    "nudge_": "asrsched.core.nudge:nudge_from_name",
    "class_": "asrsched.core.priority:class_policy_from_name",
}


def _resolve(name: str) -> None:
    """Register ``name`` if it belongs to a policy family (:data:`POLICY_FAMILIES`) and is not registered yet."""
    lname = str(name).lower()
    if lname in POLICIES:
        return
    for prefix, target in POLICY_FAMILIES.items():
        if lname.startswith(prefix):
            import importlib

            mod, fn = target.split(":")
            getattr(importlib.import_module(mod), fn)(lname)
            return


def policy_names() -> list[str]:
    """Registered policy names, sorted."""
    return sorted(POLICIES)


def allowed_policies_text() -> str:
    """What a policy name may be, for error messages: the registered names and the families' patterns."""
    return (
        ", ".join(policy_names())
        + ", or a member of a family: "
        + ", ".join(f"{p}<parameters>" for p in POLICY_FAMILIES)
    )


def make_queue(policy: str | WaitingQueue, **params: Any) -> WaitingQueue:
    """A fresh waiting queue for ``policy`` (a registered name, case-insensitive).

    Raises ``ValueError`` naming the allowed values for an unknown name.
    """
    if isinstance(policy, WaitingQueue):
        return policy
    _resolve(str(policy))
    factory = POLICIES.get(str(policy).lower())
    if factory is None:
        raise ValueError(f"unknown policy {policy!r}; allowed values: {', '.join(policy_names())}")
    q = factory(**params)
    if not getattr(q, "name", None) or q.name in ("key", "abstract"):
        q.name = str(policy).lower()
    return q


def validate_policies(policies: list[str]) -> list[str]:
    """Lower-cased policy names, or ``ValueError`` naming the first unknown one."""
    out = []
    for p in policies:
        _resolve(str(p))
        if str(p).lower() not in POLICIES:
            raise ValueError(f"unknown policy {p!r}; allowed values: {', '.join(policy_names())}")
        out.append(str(p).lower())
    return out


@register_policy("fcfs")
def _fcfs() -> WaitingQueue:
    return KeyQueue(lambda j: j.arrival, name="fcfs")


@register_policy("sjf")
def _sjf() -> WaitingQueue:
    return KeyQueue(lambda j: (j.est_service, j.arrival), name="sjf")


@register_policy("ljf")
def _ljf() -> WaitingQueue:
    return KeyQueue(lambda j: (-j.est_service, j.arrival), name="ljf")


@register_policy("hrrn")
def _hrrn() -> WaitingQueue:
    return HRRNQueue()


@register_policy("random")
def _random(seed: int = 0) -> WaitingQueue:
    return RandomQueue(seed=seed)


@register_policy("adaptive")
def _adaptive(low_depth: int = 4, ratio_cap: float = 50.0) -> WaitingQueue:
    return AdaptiveQueue(low_depth=low_depth, ratio_cap=ratio_cap)
