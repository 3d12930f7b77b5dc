"""Priority classes: the class first, a duration policy inside each class, and an optional aging bound.

vLLM requests carry a ``priority`` (lower is served first; orchestrators such as NVIDIA Dynamo set it), and
so do the jobs here (``Job.priority``, :class:`asrsched.core.policies.Job`). :class:`ClassQueue` keeps one waiting
queue of an inner policy (FCFS, SJF, HRRN, γ-Boost, ...) per priority value and admits from the best
non-empty class, by the inner policy. With ``aging_s`` a request of a lower class that has waited at least
``aging_s`` seconds is admitted first (the longest-waiting such request), so no request of a lower class
waits much longer than the bound: at most ``aging_s`` plus the time until the next admission, one service
time when the engine runs one request at a time (a test checks this in the simulator).

Names (registered on first use, :data:`asrsched.core.policies.POLICY_FAMILIES`): ``class_<inner>`` and
``class_<inner>_age<seconds>``, e.g. ``class_sjf``, ``class_hrrn_age30``, ``class_gamma_boost_0.5_age10``.
The order depends on the clock, so the Python engines run it (the compiled engine says it cannot), as do the
HTTP server and the vLLM plug-in.
"""

from __future__ import annotations

import math
import re
from collections import OrderedDict
from collections.abc import Iterator

from asrsched.core.policies import POLICIES, Job, WaitingQueue, make_queue, register_policy, validate_policies

__all__ = ["ClassQueue", "class_policy_name", "register_class_policy", "class_policy_from_name", "check_priority"]

_AGE = re.compile(r"^(?P<inner>.+?)_age(?P<age>[^_]+)$")


def check_priority(value) -> int:
    """A request's priority as an int (``None`` is 0); ``ValueError`` naming a value that is not a whole number."""
    if value is None:
        return 0
    if isinstance(value, bool):
        raise ValueError(f"priority: must be a whole number (lower is served first), got {value!r}")
    try:
        f = float(value)
    except (TypeError, ValueError):
        raise ValueError(f"priority: must be a whole number (lower is served first), got {value!r}") from None
    if not (math.isfinite(f) and f == int(f)):
        raise ValueError(f"priority: must be a whole number (lower is served first), got {value!r}")
    return int(f)


class ClassQueue(WaitingQueue):
    """One ``inner`` queue per priority value; the best class first, aged requests of lower classes before it."""

    def __init__(self, inner: str = "fcfs", aging_s: float | None = None, name: str | None = None, **inner_params):
        (self.inner,) = validate_policies([inner])
        if aging_s is not None and not (isinstance(aging_s, (int, float)) and 0 <= aging_s < math.inf):
            raise ValueError(f"aging_s: the aging bound must be a number of seconds >= 0, got {aging_s!r}")
        self.aging_s = None if aging_s is None else float(aging_s)
        self.inner_params = dict(inner_params)
        make_queue(self.inner, **self.inner_params)  # bad parameters fail now
        self.name = name or class_policy_name(self.inner, self.aging_s)
        self._classes: dict[int, WaitingQueue] = {}
        self._order: dict[int, OrderedDict] = {}  # per class: id(job) -> job, in push order (the oldest first)
        self._peeked: tuple[float, Job] | None = None
        self._n = 0

    def push(self, job: Job) -> None:
        p = job.priority
        if p not in self._classes:
            self._classes[p] = make_queue(self.inner, **self.inner_params)
            self._order[p] = OrderedDict()
        self._classes[p].push(job)
        self._order[p][id(job)] = job
        self._n += 1
        self._peeked = None

    def _choose(self, now: float) -> Job:
        live = sorted(p for p, q in self._classes.items() if q)
        if not live:
            raise self._empty()
        top = live[0]
        if self.aging_s is not None and len(live) > 1:
            oldest = [next(iter(self._order[p].values())) for p in live[1:]]
            aged = [j for j in oldest if now - j.arrival >= self.aging_s]
            if aged:
                return min(aged, key=lambda j: (j.arrival, j.priority))
        return self._classes[top].peek(now)

    def peek(self, now: float) -> Job:
        if self._peeked is not None and self._peeked[0] == now:
            return self._peeked[1]
        job = self._choose(now)
        self._peeked = (now, job)
        return job

    def pop(self, now: float) -> Job:
        job = self.peek(now)
        self.remove(job)
        return job

    def remove(self, job: Job) -> bool:
        self._peeked = None
        p = job.priority
        if p not in self._classes or self._order[p].pop(id(job), None) is None:
            return False
        self._classes[p].remove(job)
        self._n -= 1
        return True

    def __len__(self) -> int:
        return self._n

    def __iter__(self) -> Iterator[Job]:
        return iter([j for p in sorted(self._order) for j in self._order[p].values()])


def class_policy_name(inner: str, aging_s: float | None = None) -> str:
    """``class_<inner>`` or ``class_<inner>_age<aging_s>`` (``%g``)."""
    return f"class_{inner}" if aging_s is None else f"class_{inner}_age{aging_s:g}"


def register_class_policy(inner: str, aging_s: float | None = None, name: str | None = None) -> str:
    """Register the class policy over ``inner`` with ``aging_s`` (idempotent); its registry name."""
    q = ClassQueue(inner, aging_s)  # checks both
    lname = (name or q.name).lower()
    if lname not in POLICIES:
        register_policy(lname)(lambda **kw: ClassQueue(q.inner, q.aging_s, name=lname, **kw))
    return lname


def class_policy_from_name(name: str) -> str:
    """Register ``class_<inner>[_age<s>]`` from its name (the registry does this on first use)."""
    lname = str(name).lower()
    rest = lname.removeprefix("class_")
    m = _AGE.match(rest)
    inner, age = (m["inner"], m["age"]) if m else (rest, None)
    aging = None
    if age is not None:
        try:
            aging = float(age)
        except ValueError:
            raise ValueError(f"policy {name!r}: write class_<policy> or class_<policy>_age<seconds>") from None
    if not inner:
        raise ValueError(f"policy {name!r}: write class_<policy> or class_<policy>_age<seconds>")
    return register_class_policy(inner, aging, name=lname)
