"""From the precision study to a plan: the sd law, power, required experiment length, MDE, a recommendation.

Input: a :class:`~asrsched.abtest.planner.PlanResult` (``reps`` experiments of every design at
each experiment length, the truth at each length). For each design and estimator of the
change in mean E2EL:

* :func:`precision_table` -- per experiment length: mean estimate, sd (95 % percentile-bootstrap CI
  over the experiments), the CI half-width the estimator reports (batch means), bias against the
  truth of that length, and the share of experiments whose own 95 % CI excludes zero on the true
  effect's side (``detected``, with a Wilson interval);
* :func:`law_table` -- the **sd law** ``sd(T) = a T^b`` fitted on log-log axes over the lengths
  (``b`` with a bootstrap CI; ``b = -1/2`` is the rate of independent data); the lengths whose
  observed sd lies outside its CI around the fit are where the law breaks (``off_law_s``); the
  **CI ratio** ``c(T)`` = the estimator's reported 95 % half-width / the true sd at each length
  (about 2 for an honest interval; batch means with few or short batches give other values); the
  **bias ratio** ``r`` = mean estimate / true effect, pooled over the lengths (1 = unbiased;
  ``r < 1`` an attenuated estimate, ``r <= 0`` the wrong sign), with a delta-method CI;
* :func:`plan_table` -- for an operator's effect (a relative change ``effect`` of the control's
  mean E2EL, in the direction of the simulated pair's true effect) at ``power`` and ``level``: the
  required experiment length, the power curve and the minimum detectable effect (MDE) at a given
  length, each estimator's status, and the recommended design and estimator
  (:func:`plan_recommendation`).

Power model. An experiment of length ``T`` reports ``estimate +- c(T) sd(T)``; the operator
detects the effect when that interval excludes zero on the effect's side. With the estimate
``~ N(r delta, sd(T)^2)`` (``delta`` the operator's effect; the bias taken as proportional to the
effect, to first order, with the ratio ``r`` measured on the simulated pair) the power is
``Phi(r delta / sd(T) - c(T))`` (``c`` log-interpolated between the simulated lengths, held
outside them, and rescaled from 95 % to ``1 - level`` by the ratio of the t quantiles). A biased
estimator's curve is the unbiased one's at ``r delta``: attenuation (``r < 1``) flattens it, the
wrong sign never detects. The required length is the first length where the power reaches the
target on the fitted law; beyond twice the longest simulated length it is an extrapolation and
says so. An estimator whose bias-ratio CI lies outside ``1 +- max_bias`` is ``biased`` and is not
recommended, whatever its length.

The model is checked where it can be: at every simulated length the predicted power for the
pair's own effect stands beside the detected share (:func:`precision_table`), and the test suite
runs fresh experiments at a planned length (``tests/abtest/test_planner.py``).
"""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
from scipy import stats

from asrsched.abtest.planner import PlanResult
from asrsched.core.labels import estimator_label
from asrsched.core.stats import percentile_ci
from asrsched.sim.parallel import task_seed

__all__ = [
    "precision_table",
    "law_table",
    "power_at",
    "required_length",
    "plan_table",
    "plan_recommendation",
    "check_target",
    "false_positive_rate",
    "mde_at",
    "mixed_gain_table",
    "design_label",
    "model_check",
    "wilson_ci",
]

_N_BOOT = 1000  # bootstrap draws behind the CIs of sd and of the law's exponent
_KEYS = ["factor", "design", "block_s", "estimator"]
#: a required length beyond this multiple of the longest simulated length is an extrapolation of the law
EXTRAPOLATION = 2.0


def wilson_ci(k: int, n: int, level: float = 0.95) -> tuple[float, float]:
    """Wilson score interval of a proportion ``k / n`` (stays inside [0, 1])."""
    if n <= 0:
        return float("nan"), float("nan")
    z = float(stats.norm.ppf(0.5 + level / 2))
    ph = k / n
    den = 1 + z * z / n
    mid = (ph + z * z / (2 * n)) / den
    half = z * math.sqrt(ph * (1 - ph) / n + z * z / (4 * n * n)) / den
    return max(0.0, mid - half), min(1.0, mid + half)


def check_target(effect: float, power: float, level: float) -> None:
    """Refuse an effect, power or level that no plan can have (before any work)."""
    if not (isinstance(effect, (int, float)) and math.isfinite(effect) and effect > 0):
        raise ValueError(f"effect: need a relative change > 0 of the control's mean E2EL (0.10 = 10 %), got {effect!r}")
    if not (isinstance(power, (int, float)) and 0 < power < 1):
        raise ValueError(f"power: need a probability in (0, 1), got {power!r}")
    if not (isinstance(level, (int, float)) and 0 < level < 1):
        raise ValueError(f"level: need a significance level in (0, 1), got {level!r}")


def design_label(design: str, block_s: float = 0.0) -> str:
    """``"switchback 60 s blocks"`` for a block design, else the design's name."""
    return f"{design} {block_s:g} s blocks" if block_s else str(design)


def _rng(*key) -> np.random.Generator:
    return np.random.default_rng(task_seed("plan_report", *key, digest_size=8))


def _cells(res: PlanResult):
    """(key, length, estimates array, row) per design/estimator/length, in a stable order."""
    e = res.estimates
    order = {L: i for i, L in enumerate(res.config.lengths_s)}
    for key, g in e.groupby(_KEYS, sort=False):
        for length, h in sorted(g.groupby("length_s"), key=lambda x: order.get(x[0], 0)):
            yield key, float(length), h


def _truth(res: PlanResult, factor: str, length: float) -> pd.Series:
    t = res.truth
    return t[(t.factor == factor) & (t.length_s == length)].iloc[0]


def precision_table(res: PlanResult) -> pd.DataFrame:
    """Per design x estimator x experiment length: estimate, sd, half-width, bias and detected share (module docstring)."""
    rows = []
    for (factor, design, block_s, est), length, h in _cells(res):
        v = h["estimate"].to_numpy(float)
        v = v[np.isfinite(v)]
        tr = _truth(res, factor, length)
        n = v.size
        sd = float(v.std(ddof=1)) if n > 1 else np.nan
        boot = v[_rng(factor, design, block_s, est, length).integers(0, n, size=(_N_BOOT, n))].std(axis=1, ddof=1)
        lo, hi = percentile_ci(boot)
        half = (h["ci_hi"] - h["estimate"]).to_numpy(float)
        side = np.sign(tr.gte) if tr.gte != 0 else 1.0
        det = (h["ci_lo"] > 0) if side > 0 else (h["ci_hi"] < 0)
        k = int(det.sum())
        dlo, dhi = wilson_ci(k, int(len(h)))
        bias = float(v.mean() - tr.gte) if n else np.nan
        rows.append(
            dict(
                factor=factor,
                design=design,
                block_s=float(block_s),
                estimator=est,
                length_s=length,
                n_requests=res.config.n_requests(length),
                reps=int(n),
                control_mean=float(tr.value_control),
                gte=float(tr.gte),
                gte_se=float(tr.gte_se),
                mean=float(v.mean()) if n else np.nan,
                sd=sd,
                sd_ci_lo=lo,
                sd_ci_hi=hi,
                half_width=float(np.nanmean(half)),
                n_batches=int(np.nanmedian(h["n_batches"])) if "n_batches" in h else int(res.config.n_batches),
                bias=bias,
                bias_se=float(math.sqrt(sd * sd / n + tr.gte_se**2)) if n > 1 else np.nan,
                detected=k / max(1, len(h)),
                detected_ci_lo=dlo,
                detected_ci_hi=dhi,
            )
        )
    out = pd.DataFrame(rows)
    out["sd_pct"] = 100 * out["sd"] / out["control_mean"]
    out["ci_ratio"] = out["half_width"] / out["sd"]  # about 2 for an honest 95 % CI
    return out


def _fit(x: np.ndarray, y: np.ndarray) -> tuple[float, float]:
    """``log y = log a + b log x``: (a, b) by least squares over the finite positive points."""
    ok = np.isfinite(y) & (y > 0)
    if ok.sum() < 2:
        return float("nan"), float("nan")
    b, loga = np.polyfit(np.log(x[ok]), np.log(y[ok]), 1)
    return float(math.exp(loga)), float(b)


def law_table(res: PlanResult, prec: pd.DataFrame | None = None) -> pd.DataFrame:
    """Per design x estimator: the sd law, where it breaks, the CI ratio per length, and the bias ratio."""
    prec = precision_table(res) if prec is None else prec
    rows = []
    e = res.estimates
    for key, g in prec.groupby(_KEYS, sort=False):
        factor, design, block_s, est = key
        x = g["length_s"].to_numpy(float)
        a, b = _fit(x, g["sd"].to_numpy(float))
        # the exponent's CI: resample the experiments at every length
        rng = _rng("law", *key)
        cell = e[(e.factor == factor) & (e.design == design) & (e.block_s == block_s) & (e.estimator == est)]
        samples = [cell[cell.length_s == L]["estimate"].dropna().to_numpy(float) for L in x]
        bs = []
        for _ in range(_N_BOOT // 2):
            sds = np.array([s[rng.integers(0, s.size, s.size)].std(ddof=1) if s.size > 1 else np.nan for s in samples])
            bs.append(_fit(x, sds)[1])
        b_lo, b_hi = percentile_ci(np.array(bs))
        fitted = a * x**b
        off = [float(L) for L, f, lo, hi in zip(x, fitted, g["sd_ci_lo"], g["sd_ci_hi"]) if not lo <= f <= hi]
        # bias ratio pooled over the lengths: mean estimate / true effect (delta-method CI)
        m = len(g)
        num, den = float(g["mean"].mean()), float(g["gte"].mean())
        num_se = float(math.sqrt(np.sum(g["sd"] ** 2 / g["reps"])) / m)
        den_se = float(math.sqrt(np.sum(g["gte_se"] ** 2)) / m)
        measurable = abs(den) > 2 * den_se
        r = num / den if measurable else np.nan
        r_se = math.sqrt(num_se**2 + (r * den_se) ** 2) / abs(den) if measurable else np.nan
        rows.append(
            dict(
                factor=factor,
                design=design,
                block_s=float(block_s),
                estimator=est,
                sd_a=a,
                sd_exponent=b,
                sd_exponent_ci_lo=b_lo,
                sd_exponent_ci_hi=b_hi,
                off_law_s=off,
                lengths_s=[float(v) for v in x],
                ci_ratio=[float(v) for v in g["ci_ratio"]],
                n_batches=int(g["n_batches"].median()),
                bias_ratio=r,
                bias_ratio_ci_lo=r - 1.96 * r_se,
                bias_ratio_ci_hi=r + 1.96 * r_se,
                gte=den,
                control_mean=float(g["control_mean"].mean()),
                longest_s=float(x.max()),
                shortest_s=float(x.min()),
            )
        )
    out = pd.DataFrame(rows)
    order = {d: i for i, d in enumerate((*res.config.routing_designs, *res.config.scheduling_designs))}
    out = out.assign(_o=out.design.map(order)).sort_values(["factor", "_o", "block_s"], kind="stable")
    return out.drop(columns="_o").reset_index(drop=True)


def _sd(law, T) -> np.ndarray:
    return law["sd_a"] * np.asarray(T, float) ** law["sd_exponent"]


def _ci_ratio(law, T, level: float) -> np.ndarray:
    """The estimator's CI half-width in units of the fitted sd at ``T`` (log-interpolated between the
    simulated lengths, held at the end values outside them), rescaled from 95 % to ``1 - level``."""
    k = max(2, int(law["n_batches"]))
    scale = stats.t.ppf(1 - level / 2, k - 1) / stats.t.ppf(0.975, k - 1)
    c = np.interp(np.log(np.asarray(T, float)), np.log(law["lengths_s"]), law["ci_ratio"])
    return scale * c


def _ratio(law) -> float:
    r = law["bias_ratio"]
    return 1.0 if not np.isfinite(r) else float(r)


def power_at(law, T, effect: float, level: float = 0.05) -> np.ndarray:
    """Power of one estimator (a :func:`law_table` row) at experiment lengths ``T`` for a relative ``effect``.

    ``Phi(r effect m / sd(T) - c(T))``: ``m`` the control's mean E2EL, ``sd`` the fitted law, ``c`` the
    estimator's own CI half-width in sds (:func:`precision_table`'s ``ci_ratio``).
    """
    T = np.asarray(T, float)
    mu = _ratio(law) * effect * law["control_mean"]  # the expected estimate, on the effect's side when > 0
    return stats.norm.cdf(mu / _sd(law, T) - _ci_ratio(law, T, level))


def false_positive_rate(law, T, level: float = 0.05) -> np.ndarray:
    """The test's size at ``T``: how often the estimator's own CI excludes zero when there is no effect.

    ``2 Phi(-c(T))``; ``level`` for an honest interval, more when batch means make the CI too narrow.
    """
    return 2 * stats.norm.cdf(-_ci_ratio(law, T, level))


def required_length(law, effect: float, power: float = 0.8, level: float = 0.05) -> float:
    """Shortest experiment length (s) whose power reaches ``power`` with a valid test (``inf`` if none).

    A length counts only where the test's :func:`false_positive_rate` is at most twice ``level``
    (an estimator's own CI that is too narrow there detects noise as often as effects).
    """
    check_target(effect, power, level)
    if _ratio(law) <= 0 or not law["sd_exponent"] < 0:
        return float("inf")
    grid = np.geomspace(1.0, 1e9, 2001)  # the CI ratio makes the power non-monotone at short lengths
    valid = false_positive_rate(law, grid, level) <= 2 * level
    ok = np.flatnonzero((power_at(law, grid, effect, level) >= power) & valid)
    if not ok.size:
        return float("inf")
    i = int(ok[0])
    if i == 0:
        return float(grid[0])
    lo, hi = float(grid[i - 1]), float(grid[i])
    for _ in range(60):  # refine the first crossing by bisection on log T
        mid = math.sqrt(lo * hi)
        good = power_at(law, mid, effect, level) >= power and false_positive_rate(law, mid, level) <= 2 * level
        lo, hi = (lo, mid) if good else (mid, hi)
    return hi


def mde_at(law, T: float, power: float = 0.8, level: float = 0.05) -> float:
    """Minimum detectable relative effect at experiment length ``T`` (``inf`` for the wrong sign)."""
    r = _ratio(law)
    if r <= 0:
        return float("inf")
    need = float(_sd(law, T) * (_ci_ratio(law, T, level) + stats.norm.ppf(power)))
    return need / (r * law["control_mean"])


def _status(law, T: float, max_bias: float, level: float) -> str:
    """``wrong sign`` / ``biased`` when the bias ratio's CI says so, else whether the length is reachable."""
    r, lo, hi = law["bias_ratio"], law["bias_ratio_ci_lo"], law["bias_ratio_ci_hi"]
    if np.isfinite(r) and hi < 0:
        return "wrong sign"
    if np.isfinite(r) and (lo > 1 + max_bias or hi < 1 - max_bias):
        return f"biased ({100 * (r - 1):+.0f} %)"
    if not np.isfinite(T) and _ratio(law) > 0:
        fpr = float(false_positive_rate(law, law["longest_s"], level))
        if fpr > 2 * level:
            return f"CI too narrow (false-positive rate {100 * fpr:.0f} %)"
    if not np.isfinite(T):
        return "never"
    if T > EXTRAPOLATION * law["longest_s"]:
        return "extrapolated"
    return "ok" if np.isfinite(r) else "ok (bias not measurable)"


def plan_table(
    res: PlanResult,
    effect: float = 0.10,
    power: float = 0.8,
    level: float = 0.05,
    max_bias: float = 0.25,
    at_length_s: float | None = None,
    laws: pd.DataFrame | None = None,
) -> pd.DataFrame:
    """Per design x estimator: required experiment length for ``effect``, MDE at ``at_length_s``, status, recommendation.

    ``effect``: relative change of the control's mean E2EL (0.10 = 10 %); ``max_bias``: the largest
    relative bias (``|r - 1|``) a recommended estimator may have; ``at_length_s``: where the MDE is
    read (default the longest simulated length). ``recommended`` marks, per factor, the usable
    estimator (status ``ok``: not biased, and a required length within twice the longest simulated one) with
    the shortest required length; an ``extrapolated`` length is shown but never recommended.
    """
    check_target(effect, power, level)
    if not (isinstance(max_bias, (int, float)) and max_bias >= 0):
        raise ValueError(f"max_bias: need a relative bias >= 0, got {max_bias!r}")
    laws = law_table(res) if laws is None else laws
    at = float(max(res.config.lengths_s) if at_length_s is None else at_length_s)
    if not at > 0:
        raise ValueError(f"at_length_s: need an experiment length > 0 s, got {at_length_s!r}")
    rows = []
    rate = res.config.total_rate()
    for law in laws.to_dict("records"):
        T = required_length(law, effect, power, level)
        status = _status(law, T, max_bias, level)
        rows.append(
            dict(
                factor=law["factor"],
                design=law["design"],
                block_s=law["block_s"],
                setting=design_label(law["design"], law["block_s"]),
                estimator=law["estimator"],
                label=estimator_label(law["estimator"]),
                required_s=T,
                required_min=T / 60,
                required_requests=T * rate if np.isfinite(T) else np.inf,
                mde_pct=100 * mde_at(law, at, power, level)
                if false_positive_rate(law, at, level) <= 2 * level
                else np.inf,
                mde_at_s=at,
                bias_ratio=law["bias_ratio"],
                sd_exponent=law["sd_exponent"],
                status=status,
            )
        )
    out = pd.DataFrame(rows)
    usable = out.status.str.startswith("ok")  # unbiased enough and inside what was simulated
    out["recommended"] = False
    for _factor, g in out[usable].groupby("factor"):
        out.loc[g["required_s"].idxmin(), "recommended"] = bool(np.isfinite(g["required_s"].min()))
    out.attrs.update(effect=effect, power=power, level=level, max_bias=max_bias)
    return out


def model_check(prec: pd.DataFrame, laws: pd.DataFrame) -> pd.DataFrame:
    """:func:`precision_table` with ``predicted``: the power model's power for the simulated pair's own effect
    at each simulated length, beside the share of experiments that detected it (``detected``)."""
    key = _KEYS
    by = {tuple(r[k] for k in key): r for r in laws.to_dict("records")}
    pred = [
        float(power_at(law, r["length_s"], abs(law["gte"]) / law["control_mean"]))
        for r in prec.to_dict("records")
        for law in [by[tuple(r[k] for k in key)]]
    ]
    return prec.assign(predicted=pred)


def _fmt_len(s: float) -> str:
    if not np.isfinite(s):
        return "never"
    if s < 120:
        return f"{s:.0f} s"
    if s < 7200:
        return f"{s / 60:.0f} min"
    return f"{s / 3600:.1f} h"


def plan_recommendation(plan: pd.DataFrame, res: PlanResult) -> str:
    """The plan in words, per factor: the design and estimator to use, or why none reaches the effect."""
    a = plan.attrs
    lines = []
    for factor, g in plan.groupby("factor", sort=False):
        t = res.truth[res.truth.factor == factor].iloc[0]
        pair = f"{t.control.replace('|', ' / ')} -> {t.treatment.replace('|', ' / ')}"
        head = (
            f"{factor} test ({pair}): to detect a {100 * a['effect']:.0f} % change in mean E2EL with "
            f"{100 * a['power']:.0f} % power at the {100 * a['level']:.0f} % level"
        )
        rec = g[g.recommended]
        if rec.empty:
            why = "; ".join(f"{r.setting} / {r.label}: {r.status}" for r in g.itertuples())
            ext = g[g.status == "extrapolated"].sort_values("required_s")
            hint = (
                f" The shortest extrapolated length is {_fmt_len(ext.required_s.iloc[0])} ({ext.setting.iloc[0]} / "
                f"{ext.label.iloc[0]}); simulate longer experiments to confirm it."
                if len(ext)
                else ""
            )
            lines.append(
                f"- {head}, no design reaches it within twice the longest simulated length "
                f"({_fmt_len(2 * float(res.config.lengths_s[-1]))}) without a bias beyond "
                f"{100 * a['max_bias']:.0f} % ({why}).{hint}"
            )
            continue
        r = rec.iloc[0]
        others = g[~g.recommended].sort_values("required_s")
        rest = ", ".join(f"{o.setting} / {o.label} {_fmt_len(o.required_s)} ({o.status})" for o in others.itertuples())
        lines.append(
            f"- {head}, run a **{r.setting}** design with the **{r.label}** estimator for "
            f"**{_fmt_len(r.required_s)}** of traffic ({r.required_requests:,.0f} requests; {r.status}). "
            f"Others: {rest}."
        )
    return "\n".join(lines)


def mixed_gain_table(res: PlanResult) -> pd.DataFrame:
    """Where mixed DQ pays on the fleet: per experiment length, ``sd(better DQ) / sd(mixed DQ)`` and
    ``sd(worse DQ) / sd(mixed DQ)`` over the Bernoulli experiments, with paired 95 % bootstrap CIs
    (the same experiments resampled for all three estimators). Empty without a Bernoulli design."""
    e = res.estimates
    e = e[(e.design == "bernoulli") & e.estimator.isin(["qdq", "wdq", "mixed_dq"])]
    rows = []
    for (factor, length), g in e.groupby(["factor", "length_s"], sort=True):
        w = g.pivot_table(index="rep", columns="estimator", values="estimate").dropna()
        if w.shape[0] < 3 or w.shape[1] < 3:
            continue
        x = w[["qdq", "wdq", "mixed_dq"]].to_numpy(float)
        sd = x.std(axis=0, ddof=1)
        idx = _rng("mixed", factor, length).integers(0, len(x), size=(_N_BOOT, len(x)))
        bs = x[idx].std(axis=1, ddof=1)  # (draws, 3)
        better, worse = np.minimum(bs[:, 0], bs[:, 1]) / bs[:, 2], np.maximum(bs[:, 0], bs[:, 1]) / bs[:, 2]
        b_lo, b_hi = percentile_ci(better)
        w_lo, w_hi = percentile_ci(worse)
        rows.append(
            dict(
                factor=factor,
                length_s=float(length),
                reps=len(x),
                sd_qdq=sd[0],
                sd_wdq=sd[1],
                sd_mixed_dq=sd[2],
                gain_over_better=min(sd[0], sd[1]) / sd[2],
                gain_over_better_ci_lo=b_lo,
                gain_over_better_ci_hi=b_hi,
                gain_over_worse=max(sd[0], sd[1]) / sd[2],
                gain_over_worse_ci_lo=w_lo,
                gain_over_worse_ci_hi=w_hi,
            )
        )
    return pd.DataFrame(rows)
