"""The simulator on one slot is an M/G/1 queue, and agrees with its closed forms.

* FCFS: the Pollaczek-Khinchine mean wait ``λ E[S²] / (2 (1 - ρ))``;
* FCFS: the response-time tail ``P(T > t) ~ C exp(-γ* t)``, ``γ*`` the root of ``λ (E[exp(γ S)] - 1) = γ``
  (Cramér-Lundberg; the rate γ-Boost is tuned to, Yu & Scully 2024): the log-survival slope of the response
  time between its P99 and P99.95, over independent runs;
* SJF (non-preemptive, sizes known): the mean wait of a job of size ``x``,
  ``λ E[S²] / 2 / ((1 - ρ(<x)) (1 - ρ(<=x)))`` with ``ρ(<x)`` the load of the smaller jobs (Phipps 1956;
  Harchol-Balter 2013, ch. 31), averaged per size quintile.

``S`` is the engine time of a request (admission to finish, less the client-side ``overhead_s``); sizes are
estimated without noise (``noise_cv = 0``), so SJF orders by the true size. Noise: batch means over 20
blocks of consecutive requests; the theory must lie within 3 standard errors (and 5 % for the tail rate).
"""

import numpy as np
import pytest

from asrsched.core.gamma_boost import decay_rate
from asrsched.core.service import ServiceModel
from asrsched.core.workloads import make_trace
from asrsched.sim.engine import simulate

SVC = ServiceModel(encode_s_per_window=0.05, decode_s_per_token=0.02, overhead_s=0.1, kappa={"en": 3.3})
N = 100_000
SKIP = 1000


@pytest.fixture(scope="module")
def mg1():
    probe = make_trace("uniform", rate=1.0, n=2000, seed=1, kappa=3.3, noise_cv=0.0)
    rate = 0.8 / float(np.mean(SVC.est_service(probe.duration, probe.language)))
    tr = make_trace("uniform", rate=rate, n=N, seed=3, kappa=3.3, noise_cv=0.0)
    out = {}
    for pol in ("fcfs", "sjf"):
        r = simulate(tr, pol, SVC, max_num_seqs=1, warn_overload=False).records.sort_values("rid")
        S = (r.finish - r.admit).to_numpy() - SVC.overhead_s
        W = (r.admit - r.arrival).to_numpy()
        out[pol] = (S, W)
    lam = (N - 1) / float(tr.arrival[-1] - tr.arrival[0])
    return lam, out


def _batch_se(x: np.ndarray, k: int = 20) -> float:
    means = np.array([b.mean() for b in np.array_split(x, k)])
    return float(means.std(ddof=1) / np.sqrt(k))


def test_fcfs_mean_wait_is_pollaczek_khinchine(mg1):
    lam, out = mg1
    S, W = out["fcfs"]
    rho = lam * S.mean()
    assert 0.7 < rho < 0.8
    pk = lam * np.mean(S**2) / (2 * (1 - rho))
    w = W[SKIP:]
    assert abs(w.mean() - pk) < 3 * _batch_se(w), (w.mean(), pk)


def test_fcfs_tail_decays_at_the_cramer_lundberg_rate():
    """At load 0.5, over 6 independent runs of 150,000 requests: the log-survival slope of the response time
    fitted between its P99 and P99.95 (tail events come in busy periods, so one run's slope is noisy)."""
    probe = make_trace("uniform", rate=1.0, n=2000, seed=1, kappa=3.3, noise_cv=0.0)
    rate = 0.5 / float(np.mean(SVC.est_service(probe.duration, probe.language)))
    slopes, rates = [], []
    for seed in range(6):
        tr = make_trace("uniform", rate=rate, n=150_000, seed=10 + seed, kappa=3.3, noise_cv=0.0)
        r = simulate(tr, "fcfs", SVC, max_num_seqs=1, warn_overload=False).records.sort_values("rid")
        S = (r.finish - r.admit).to_numpy() - SVC.overhead_s
        T = (r.finish - r.arrival).to_numpy()[SKIP:] - SVC.overhead_s
        lam = (len(tr) - 1) / float(tr.arrival[-1] - tr.arrival[0])
        rates.append(decay_rate(lam, S))
        ts = np.quantile(T, np.linspace(0.99, 0.9995, 30))
        slopes.append(-np.polyfit(ts, np.log([np.mean(T > t) for t in ts]), 1)[0])
    g, sl = float(np.mean(rates)), np.asarray(slopes)
    se = sl.std(ddof=1) / np.sqrt(len(sl))
    assert abs(sl.mean() - g) < max(3 * se, 0.02 * g) and sl.mean() == pytest.approx(g, rel=0.10), (sl, g)


def test_sjf_mean_wait_by_size_is_the_priority_queue_formula(mg1):
    lam, out = mg1
    S, W = out["sjf"]
    S, W = S[SKIP:], W[SKIP:]
    order = np.sort(S)
    load_below = lam * np.concatenate(([0.0], np.cumsum(order))) / len(S)  # load of the jobs smaller than x
    lo = load_below[np.searchsorted(order, S, side="left")]
    le = load_below[np.searchsorted(order, S, side="right")]
    theory = lam * np.mean(S**2) / 2 / ((1 - lo) * (1 - le))
    edges = np.quantile(S, np.linspace(0, 1, 6))
    for a, b in zip(edges[:-1], edges[1:]):
        m = (S >= a) & (S <= b)
        assert abs(W[m].mean() - theory[m].mean()) < 3 * _batch_se(W[m]) + 0.02, (a, b, W[m].mean(), theory[m].mean())
    assert W.mean() < out["fcfs"][1][SKIP:].mean()  # SJF's mean wait is below FCFS's
