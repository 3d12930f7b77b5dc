"""Workloads: duration sources x arrival processes, drift schedules, and the ``Trace`` value.

A request stream is an *arrival process* (when requests come) times a *duration
source* (how long each audio file is) — the Vidur split of interval generator and
length generator. Everything takes a seed and is reproducible.

Duration sources (``make_source(name)``):

* ``librispeech`` — the real LibriSpeech test-clean per-utterance durations
  (2,620 utterances, 1.3-35.0 s, median 5.8 s; CC BY 4.0, see README), resampled;
* ``uniform`` — the study's synthetic split, uniform in [5, 30] s;
* ``commonvoice_id`` — Common Voice Indonesian test split (1.1-10.0 s; CC0);
* :class:`Mixture` of sources with weights; :class:`Drift`, a schedule that
  changes the mix during a run (abrupt phases, or gradual linear ramps).

Arrival processes: :func:`poisson`, :func:`bursty` (gamma inter-arrivals with a
burstiness knob, as ``vllm bench serve --burstiness``: 1 is Poisson, < 1 burstier,
> 1 more regular), :func:`cyclic` (sinusoidal rate, by thinning).

>>> tr = make_trace("librispeech", rate=5.0, n=1000, seed=1)
>>> len(tr), round(float(tr.duration.mean()), 1) > 6
(1000, True)
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from functools import cache
from importlib import resources
from typing import Any

import numpy as np
import pandas as pd

from asrsched.core.estimate_error import EstimateError
from asrsched.core.estimate_error import estimate_error as as_estimate_error

__all__ = [
    "DurationSource",
    "check_rhos",
    "Empirical",
    "Uniform",
    "Mixture",
    "Drift",
    "Trace",
    "librispeech_table",
    "commonvoice_id_table",
    "make_source",
    "workload_names",
    "poisson",
    "bursty",
    "cyclic",
    "make_arrivals",
    "make_trace",
    "check_rate",
    "trace_chunks",
    "constant_strings",
]


# ----------------------------------------------------------------------------- data


@cache
def librispeech_table() -> pd.DataFrame:
    """LibriSpeech test-clean: ``utt_id, duration_s, text`` (2,620 rows, CC BY 4.0)."""
    with resources.files("asrsched.data").joinpath("librispeech_test_clean.csv").open() as f:
        return pd.read_csv(f)


@cache
def commonvoice_id_table() -> pd.DataFrame:
    """Common Voice Indonesian test split: ``utt_id, duration_s, text, client_id`` (CC0)."""
    with resources.files("asrsched.data").joinpath("commonvoice_id_test.csv").open() as f:
        return pd.read_csv(f)


# ----------------------------------------------------------------------------- sources


class DurationSource:
    """Draws audio durations (s). Subclasses implement :meth:`sample`."""

    name = "source"
    language = "en"

    def sample(self, rng: np.random.Generator, n: int) -> np.ndarray:  # pragma: no cover
        raise NotImplementedError

    def sample_rows(self, rng: np.random.Generator, n: int) -> pd.DataFrame:
        """Durations plus, where the source has them, ``utt_id`` and ``text``."""
        return pd.DataFrame({"duration": self.sample(rng, n), "language": self.language})

    def mean(self) -> float:  # pragma: no cover
        raise NotImplementedError

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.name})"


@dataclass(repr=False)
class Empirical(DurationSource):
    """Resample a real table of utterances (with their transcripts)."""

    table: pd.DataFrame
    name: str = "empirical"
    language: str = "en"

    def sample_rows(self, rng: np.random.Generator, n: int) -> pd.DataFrame:
        idx = rng.integers(0, len(self.table), size=n)
        rows = self.table.iloc[idx]
        out = pd.DataFrame({"duration": rows["duration_s"].to_numpy(float), "language": self.language})
        for c in ("utt_id", "text"):
            if c in rows:
                out[c] = rows[c].to_numpy()
        return out

    def sample(self, rng: np.random.Generator, n: int) -> np.ndarray:
        return self.table["duration_s"].to_numpy(float)[rng.integers(0, len(self.table), size=n)]

    def mean(self) -> float:
        return float(self.table["duration_s"].mean())


@dataclass(repr=False)
class Uniform(DurationSource):
    """Durations uniform in ``[lo, hi]`` seconds (the study's synthetic 5-30 s split)."""

    lo: float = 5.0
    hi: float = 30.0
    name: str = "uniform"
    language: str = "en"

    def __post_init__(self) -> None:
        if not (0 < self.lo <= self.hi):
            raise ValueError(f"uniform durations need 0 < lo <= hi, got lo={self.lo}, hi={self.hi}")

    def sample(self, rng: np.random.Generator, n: int) -> np.ndarray:
        return rng.uniform(self.lo, self.hi, size=n)

    def mean(self) -> float:
        return 0.5 * (self.lo + self.hi)


@dataclass(repr=False)
class Mixture(DurationSource):
    """Draw from ``sources[i]`` with probability ``weights[i]``."""

    sources: Sequence[DurationSource]
    weights: Sequence[float]
    name: str = "mixture"

    def __post_init__(self) -> None:
        w = np.asarray(self.weights, float)
        if len(w) != len(self.sources) or len(w) == 0 or np.any(w < 0) or w.sum() <= 0:
            raise ValueError("mixture weights must be non-negative, one per source, not all zero")
        self._p = w / w.sum()

    def sample_rows(self, rng: np.random.Generator, n: int) -> pd.DataFrame:
        which = rng.choice(len(self.sources), size=n, p=self._p)
        parts = []
        for k, src in enumerate(self.sources):
            m = int(np.sum(which == k))
            if m:
                part = src.sample_rows(rng, m)
                part.index = np.flatnonzero(which == k)
                parts.append(part)
        return pd.concat(parts).sort_index().reset_index(drop=True)

    def sample(self, rng: np.random.Generator, n: int) -> np.ndarray:
        return self.sample_rows(rng, n)["duration"].to_numpy(float)

    def mean(self) -> float:
        return float(sum(p * s.mean() for p, s in zip(self._p, self.sources)))


@dataclass(repr=False)
class Drift:
    """A schedule that changes the duration mix during a run.

    ``phases`` is a list of ``(start_time_s, source)``; the first phase must start
    at 0. Between phases the mix switches abruptly (``ramp_s = 0``) or blends
    linearly over ``ramp_s`` seconds starting at the next phase's start time
    (gradual drift). ``end_s`` (optional) is where the schedule stops; a run
    longer than that is an error (the schedule must cover the run).

    >>> d = Drift([(0, make_source("librispeech")), (60, make_source("uniform"))], ramp_s=30)
    >>> d.weights_at(75.0)
    (0.5, 0.5)
    """

    phases: Sequence[tuple[float, DurationSource]]
    ramp_s: float = 0.0
    end_s: float | None = None
    name: str = "drift"

    def __post_init__(self) -> None:
        if not self.phases:
            raise ValueError("drift schedule needs at least one phase")
        starts = [float(t) for t, _ in self.phases]
        if starts[0] != 0.0:
            raise ValueError(f"drift schedule must start at t=0, first phase starts at {starts[0]}")
        if any(b <= a for a, b in zip(starts, starts[1:])):
            raise ValueError(f"drift phase start times must increase, got {starts}")
        if self.ramp_s < 0:
            raise ValueError(f"drift ramp_s must be >= 0, got {self.ramp_s}")
        inner = np.diff(starts)[1:]  # a ramp into phase k (k >= 1) must end before phase k+1 starts
        if len(inner) and self.ramp_s > inner.min() * (1 + 1e-9):  # tolerance: start times rounded
            raise ValueError(
                f"drift ramp_s={self.ramp_s:g} s outlasts a phase ({inner.min():g} s): the mix would jump when the "
                f"next phase starts; allowed: 0 <= ramp_s <= {inner.min():g}"
            )
        self._starts = np.asarray(starts)

    def weights_at(self, t: float) -> tuple[float, ...]:
        """Mixing weight of each phase's source at time ``t``."""
        return tuple(float(x) for x in self._weights(np.asarray([t]))[0])

    def _weights(self, t: np.ndarray) -> np.ndarray:
        k = len(self.phases)
        w = np.zeros((len(t), k))
        idx = np.searchsorted(self._starts, t, side="right") - 1
        idx = np.clip(idx, 0, k - 1)
        if self.ramp_s <= 0:
            w[np.arange(len(t)), idx] = 1.0
            return w
        frac = np.clip((t - self._starts[idx]) / self.ramp_s, 0.0, 1.0)
        prev = np.maximum(idx - 1, 0)
        has_prev = idx > 0
        w[np.arange(len(t)), idx] = np.where(has_prev, frac, 1.0)
        w[np.arange(len(t))[has_prev], prev[has_prev]] += 1.0 - frac[has_prev]
        return w

    def check_covers(self, horizon: float) -> None:
        if self.end_s is not None and horizon > self.end_s:
            raise ValueError(
                f"drift schedule ends at {self.end_s:g} s but the run lasts {horizon:g} s; "
                "extend end_s or shorten the run"
            )

    def sample_rows_at(self, rng: np.random.Generator, times: np.ndarray) -> pd.DataFrame:
        times = np.asarray(times, float)
        if len(times):
            self.check_covers(float(times.max()))
        w = self._weights(times)
        u = rng.random(len(times))
        which = np.minimum((np.cumsum(w, axis=1) < u[:, None]).sum(axis=1), len(self.phases) - 1)
        out = []
        for k, (_, src) in enumerate(self.phases):
            m = np.flatnonzero(which == k)
            if len(m):
                part = src.sample_rows(rng, len(m))
                part.index = m
                part["phase"] = k
                out.append(part)
        return pd.concat(out).sort_index().reset_index(drop=True)

    def mean(self) -> float:
        return float(np.mean([s.mean() for _, s in self.phases]))


_SOURCES: dict[str, Callable[[], DurationSource]] = {
    "librispeech": lambda: Empirical(librispeech_table(), name="librispeech", language="en"),
    "uniform": lambda: Uniform(5.0, 30.0),
    "commonvoice_id": lambda: Empirical(commonvoice_id_table(), name="commonvoice_id", language="id"),
    "mix": lambda: Mixture([_SOURCES["librispeech"](), _SOURCES["uniform"]()], [0.5, 0.5], name="mix"),
}


def workload_names() -> list[str]:
    """Names accepted by :func:`make_source`."""
    return sorted(_SOURCES) + ["drift"]


def make_source(name: str | DurationSource | Drift) -> DurationSource | Drift:
    """A duration source by name (``librispeech``, ``uniform``, ``commonvoice_id``, ``mix``, ``drift``).

    ``drift`` is LibriSpeech for 120 s, then a 60 s ramp to the uniform 5-30 s split.
    """
    if isinstance(name, (DurationSource, Drift)):
        return name
    key = str(name).lower()
    if key == "drift":
        return Drift([(0.0, _SOURCES["librispeech"]()), (120.0, _SOURCES["uniform"]())], ramp_s=60.0)
    if key not in _SOURCES:
        raise ValueError(f"unknown workload {name!r}; allowed values: {', '.join(workload_names())}")
    return _SOURCES[key]()


# ----------------------------------------------------------------------------- arrivals


def check_rate(rate: float, name: str = "rate") -> float:
    """``rate`` as a float, or ``ValueError`` if it is not a finite positive number."""
    r = float(rate)
    if not math.isfinite(r) or r <= 0:
        raise ValueError(f"{name} must be a positive number of requests per second, got {rate!r}")
    return r


def check_rhos(rhos: Sequence[float], name: str = "rhos") -> None:
    """``ValueError`` unless ``rhos`` lists at least one load, each a finite number > 0 (a fraction of capacity)."""
    if not len(rhos):
        raise ValueError(f"{name} must list at least one load (fraction of capacity, > 0)")
    for x in rhos:
        if not (isinstance(x, (int, float, np.integer, np.floating)) and np.isfinite(x) and x > 0):
            raise ValueError(f"{name} must be positive fractions of capacity (rho), got {x!r}")


def poisson(rng: np.random.Generator, rate: float, n: int) -> np.ndarray:
    """``n`` Poisson arrival times (s) at ``rate`` req/s."""
    rate = check_rate(rate)
    return np.cumsum(rng.exponential(1.0 / rate, size=n))


def bursty(rng: np.random.Generator, rate: float, n: int, burstiness: float = 1.0) -> np.ndarray:
    """Gamma inter-arrivals with mean ``1/rate`` and shape ``burstiness`` (``vllm bench serve``)."""
    rate = check_rate(rate)
    if not (burstiness > 0 and math.isfinite(burstiness)):
        raise ValueError(f"burstiness must be > 0, got {burstiness!r}")
    theta = 1.0 / (rate * burstiness)
    return np.cumsum(rng.gamma(shape=burstiness, scale=theta, size=n))


def cyclic(rng: np.random.Generator, rate: float, n: int, amplitude: float = 0.5, period_s: float = 60.0) -> np.ndarray:
    """Non-stationary Poisson with rate ``rate * (1 + amplitude * sin(2 pi t / period))`` (thinning)."""
    rate = check_rate(rate)
    if not (0 <= amplitude < 1):
        raise ValueError(f"cyclic amplitude must be in [0, 1), got {amplitude!r}")
    if period_s <= 0:
        raise ValueError(f"cyclic period_s must be > 0, got {period_s!r}")
    peak = rate * (1 + amplitude)
    out: list[np.ndarray] = []
    t0, have = 0.0, 0
    while have < n:
        m = max(64, int(1.3 * (n - have) * (1 + amplitude)))
        cand = t0 + np.cumsum(rng.exponential(1.0 / peak, size=m))
        keep = rng.random(m) * peak <= rate * (1 + amplitude * np.sin(2 * np.pi * cand / period_s))
        out.append(cand[keep])
        have += int(keep.sum())
        t0 = float(cand[-1])
    return np.concatenate(out)[:n]


ARRIVALS = {"poisson": poisson, "bursty": bursty, "cyclic": cyclic}


def make_arrivals(kind: str, rng: np.random.Generator, rate: float, n: int, **kw) -> np.ndarray:
    """Arrival times by process name (``poisson``, ``bursty``, ``cyclic``)."""
    fn = ARRIVALS.get(str(kind).lower())
    if fn is None:
        raise ValueError(f"unknown arrival process {kind!r}; allowed values: {', '.join(ARRIVALS)}")
    return fn(rng, rate, n, **kw)


# ----------------------------------------------------------------------------- trace


@dataclass
class Trace:
    """A request stream: arrival times, audio durations, languages, true token counts.

    ``tokens`` are what the engine will actually generate (kappa x duration with
    noise, or measured); policies never see them — they see the estimate.
    ``meta`` keeps the parameters that made the trace.
    """

    arrival: np.ndarray
    duration: np.ndarray
    language: np.ndarray
    tokens: np.ndarray
    extra: pd.DataFrame = field(default_factory=pd.DataFrame)
    meta: dict = field(default_factory=dict)

    def __post_init__(self) -> None:
        n = len(self.arrival)
        for f in ("duration", "language", "tokens"):
            if len(getattr(self, f)) != n:
                raise ValueError(f"trace field {f} has {len(getattr(self, f))} rows, arrival has {n}")
        if n and np.any(np.diff(self.arrival) < 0):
            raise ValueError("trace arrival times must be non-decreasing")

    def __len__(self) -> int:
        return len(self.arrival)

    def to_frame(self) -> pd.DataFrame:
        df = pd.DataFrame(
            {
                "rid": np.arange(len(self)),
                "arrival": self.arrival,
                "duration": self.duration,
                "language": self.language,
                "tokens": self.tokens,
            }
        )
        if len(self.extra):
            df = pd.concat([df, self.extra.reset_index(drop=True)], axis=1)
        return df

    @classmethod
    def from_frame(cls, df: pd.DataFrame, **meta) -> Trace:
        missing = [c for c in ("arrival", "duration", "tokens") if c not in df]
        if missing:
            raise ValueError(f"trace table is missing column(s) {', '.join(missing)}")
        lang = df["language"].to_numpy() if "language" in df else np.full(len(df), "en", dtype=object)
        extra = df.drop(columns=[c for c in ("rid", "arrival", "duration", "language", "tokens") if c in df])
        return cls(
            df["arrival"].to_numpy(float),
            df["duration"].to_numpy(float),
            lang,
            df["tokens"].to_numpy(np.int64),
            extra=extra,
            meta=dict(meta),
        )

    @property
    def rate(self) -> float:
        """Empirical arrival rate (req/s)."""
        return (len(self) - 1) / float(self.arrival[-1] - self.arrival[0]) if len(self) > 1 else float("nan")


def true_tokens(
    rng: np.random.Generator,
    duration: np.ndarray,
    kappa: float | np.ndarray,
    noise_cv: float = 0.15,
    estimate_error: EstimateError | None = None,
    language=None,
) -> np.ndarray:
    """Tokens the engine generates: ``kappa * duration`` times the estimate's error factor, >= 1.

    The factor is lognormal with cv ``noise_cv`` unless ``estimate_error``
    (:class:`~asrsched.core.estimate_error.EstimateError`; its empirical body is per ``language``) is given.
    """
    mu = np.asarray(kappa, float) * np.asarray(duration, float)
    if estimate_error is not None:
        return np.maximum(
            1, np.rint(mu * estimate_error.sample(rng, len(mu), "en" if language is None else language))
        ).astype(np.int64)
    if noise_cv > 0:
        s = math.sqrt(math.log1p(noise_cv**2))
        mu = mu * rng.lognormal(-0.5 * s * s, s, size=len(mu))
    return np.maximum(1, np.rint(mu)).astype(np.int64)


def make_trace(
    workload: str | DurationSource | Drift = "librispeech",
    *,
    rate: float,
    n: int | None = None,
    horizon_s: float | None = None,
    seed: int = 0,
    arrival: str = "poisson",
    arrival_kw: dict | None = None,
    kappa: float | dict[str, float] = 3.3,
    noise_cv: float = 0.15,
    estimate_error=None,
) -> Trace:
    """A seeded request trace: ``n`` requests (or as many as arrive in ``horizon_s``).

    ``kappa`` (tokens/s, a number or per language) makes the true token counts;
    ``noise_cv`` is the relative spread of the true tokens around ``kappa * d`` (lognormal), unless
    ``estimate_error`` names another law (:func:`asrsched.core.estimate_error.estimate_error`: a preset
    name such as ``"real"``, a spec dict or an :class:`~asrsched.core.estimate_error.EstimateError`).
    """
    err = None if estimate_error is None else as_estimate_error(estimate_error)
    rate = check_rate(rate)
    if n is None and horizon_s is None:
        raise ValueError("make_trace needs n (requests) or horizon_s (seconds)")
    if n is not None and int(n) <= 0:
        raise ValueError(f"n must be a positive number of requests, got {n!r}")
    rng = np.random.default_rng(seed)
    src = make_source(workload)
    if n is None:
        assert horizon_s is not None  # checked above
        m = int(rate * horizon_s * 1.2 + 10 * math.sqrt(rate * horizon_s) + 10)
        times = make_arrivals(arrival, rng, rate, m, **(arrival_kw or {}))
        while times[-1] < horizon_s:
            more = make_arrivals(arrival, rng, rate, m, **(arrival_kw or {})) + times[-1]
            times = np.concatenate([times, more])
        times = times[times <= horizon_s]
    else:
        times = make_arrivals(arrival, rng, rate, int(n), **(arrival_kw or {}))
    if isinstance(src, Drift):
        rows = src.sample_rows_at(rng, times)
    else:
        rows = src.sample_rows(rng, len(times))
    dur = rows["duration"].to_numpy(float)
    lang = rows["language"].to_numpy(object)
    k: np.ndarray | float
    if isinstance(kappa, dict):
        try:
            k = np.array([kappa[str(x)] for x in lang], float)
        except KeyError as e:
            raise ValueError(f"no kappa for language {e.args[0]!r}; given for {', '.join(kappa)}") from None
        if np.any(k <= 0):
            raise ValueError("kappa must be > 0 for every language")
    else:
        if not (float(kappa) > 0):
            raise ValueError(f"kappa must be a positive number of tokens per second, got {kappa!r}")
        k = float(kappa)
    tok = true_tokens(rng, dur, k, noise_cv, err, lang)
    extra = rows.drop(columns=["duration", "language"])
    meta = dict(
        workload=getattr(src, "name", str(workload)),
        rate=rate,
        seed=seed,
        arrival=arrival,
        kappa=kappa,
        noise_cv=noise_cv,
    )
    if err is not None:
        meta["estimate_error"] = err.spec()
    return Trace(times, dur, lang, tok, extra=extra, meta=meta)


# ----------------------------------------------------------------------------- long traces, in chunks


def constant_strings(value: str, n: int) -> np.ndarray:
    """An object array of ``n`` references to ``value`` (``np.full`` with ``dtype=object`` is ~100x slower)."""
    a = np.empty(n, dtype=object)
    a[:] = value
    return a


def trace_chunks(
    workload="librispeech", *, rate: float, n: int, chunk: int = 200_000, seed: int = 0, **kw
) -> Iterator[Trace]:
    """A long trace as consecutive chunks (for bounded-memory runs); chunk ``i`` uses seed ``(seed, i)``.

    Chunk ``i`` is ``make_trace(workload, rate=rate, n=..., seed=<from (seed, i)>, **kw)`` with its
    arrivals shifted to follow chunk ``i - 1``. For a single-language duration source
    (LibriSpeech, Common Voice, uniform) the chunk is drawn without the transcripts
    (``Trace.extra``), which a simulation does not read: same random draws, same arrivals,
    durations and token counts as :func:`make_trace` (``tests/sim/test_compiled_engine.py`` checks it),
    several times faster.
    """
    t0, done, i = 0.0, 0, 0
    while done < n:
        m = min(chunk, n - done)
        cseed = int(np.random.SeedSequence([seed, i]).generate_state(1)[0])
        tr = _bare_trace(workload, rate, m, cseed, **kw)
        if tr is None:
            tr = make_trace(workload, rate=rate, n=m, seed=cseed, **kw)
        tr.arrival = tr.arrival + t0
        t0 = float(tr.arrival[-1])
        done += m
        i += 1
        yield tr


def _bare_trace(
    workload: Any,
    rate: float,
    n: int,
    seed: int,
    *,
    arrival: str = "poisson",
    arrival_kw: dict | None = None,
    kappa: float | dict = 3.3,
    noise_cv: float = 0.15,
) -> Trace | None:
    """:func:`make_trace` without transcripts for a single-language source (``None`` for any other)."""
    src = make_source(workload)
    if type(src) not in (Empirical, Uniform):  # exactly these two, not a subclass
        return None
    assert isinstance(src, (Empirical, Uniform))  # what the line above means, for the type checker
    rate = check_rate(rate)
    rng = np.random.default_rng(seed)
    times = make_arrivals(arrival, rng, rate, int(n), **(arrival_kw or {}))
    dur = np.asarray(src.sample(rng, len(times)), float)  # the draws of src.sample_rows
    if isinstance(kappa, dict):
        if src.language not in kappa:
            return None  # make_trace raises its own error
        k = float(kappa[src.language])
    else:
        k = float(kappa)
    if not k > 0:
        return None
    tok = true_tokens(rng, dur, k, noise_cv)
    meta = dict(
        workload=getattr(src, "name", str(workload)),
        rate=rate,
        seed=seed,
        arrival=arrival,
        kappa=kappa,
        noise_cv=noise_cv,
    )
    return Trace(times, dur, constant_strings(src.language, len(times)), tok, meta=meta)
