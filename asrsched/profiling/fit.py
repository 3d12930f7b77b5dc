"""Fit a profile from measured rows: kappa per language, the :class:`ServiceModel`, and its checks.

Each step usable alone, on a measurement table (:data:`asrsched.profiling.measure.COLUMNS`)::

    fit_kappa(train)                     tokens = kappa x duration, outliers left out, bootstrap CI, R^2
    fit_service_model(train, kappa)      windows x enc + tokens x step + overhead
    split_holdout(rows) / validate_holdout(model, held)
                                         simulator vs measured mean service time
    silence_estimates(rows, model)       file duration vs VAD speech duration as size estimates
    vad_summary(estimates)               their errors and costs per duration source

:func:`asrsched.profiling.run.fit_profile` does all of them and returns a
:class:`~asrsched.profiling.run.ProfileRun` (report, save); :func:`~asrsched.profiling.run.refit` re-fits a
saved run folder without measuring again.

Which token count is kappa? The paper's kappa is "tokens the decoder generates
per second of audio". The :class:`ServiceModel` written here uses
``decode_steps`` (decoder forward passes, fallbacks included), because that is
what the decode time follows; ``fit["kappa_tables"]`` also holds kappa for the
kept transcript tokens and for all generated tokens.
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np
import pandas as pd

from asrsched.core.service import ServiceModel
from asrsched.core.stats import percentile_ci
from asrsched.profiling.measure import CLOCKS, TOKEN_COLUMNS
from asrsched.profiling.outliers import MIN_SPREAD, OUTLIER_Z, check_rule, rate_outliers, rule_text

__all__ = [
    "KappaFit",
    "OUTLIER_COLUMNS",
    "DURATION_SOURCES",
    "fit_kappa",
    "fit_service_model",
    "split_holdout",
    "validate_holdout",
    "silence_estimates",
    "vad_summary",
]


# --------------------------------------------------------------------------- kappa
#: the columns of ``KappaFit.outliers``, one row per clip the outlier rule left out
OUTLIER_COLUMNS = ["language", "clip", "row", "duration_s", "tokens", "rate", "median_rate", "z", "reason"]


@dataclass
class KappaFit:
    """kappa per language: ``table`` (one row per fitted language), ``skipped`` {language: why},
    ``n_dropped`` failed rows left out, the columns used, the clips the outlier rule left out
    (``outliers``, :data:`OUTLIER_COLUMNS`; ``row`` is the clip's label in the fitted table) and
    the rule in words (``rule``, :func:`asrsched.profiling.outliers.rule_text`)."""

    table: pd.DataFrame
    skipped: dict[str, str]
    n_dropped: int
    tokens: str
    duration: str
    outliers: pd.DataFrame = field(default_factory=lambda: pd.DataFrame(columns=OUTLIER_COLUMNS))
    rule: str = ""

    @property
    def kappa(self) -> dict[str, float]:
        return {r.language: float(r.kappa) for r in self.table.itertuples()}

    @property
    def ci(self) -> dict[str, tuple[float, float]]:
        return {r.language: (float(r.ci_low), float(r.ci_high)) for r in self.table.itertuples()}

    def outlier_mask(self, rows: pd.DataFrame) -> pd.Series:
        """True for the rows of ``rows`` that the outlier rule left out: same row label, language,
        duration and token count as a row of ``outliers`` (so another table's rows never match)."""
        mask = pd.Series(False, index=rows.index)
        if not len(self.outliers) or not {self.tokens, self.duration, "language"} <= set(rows):
            return mask
        lang = rows["language"].astype(str).to_numpy()
        dur = pd.to_numeric(rows[self.duration], errors="coerce").to_numpy(float)
        tok = pd.to_numeric(rows[self.tokens], errors="coerce").to_numpy(float)
        for o in self.outliers.itertuples():
            mask |= (rows.index == o.row) & (lang == o.language) & (dur == o.duration_s) & (tok == o.tokens)
        return mask

    def summary(self) -> str:
        """One line per language, plus the outliers left out, the skipped ones and the dropped-row count."""
        lines = [f"kappa ({self.tokens} per s of {self.duration}):"]
        for r in self.table.itertuples():
            k = int(getattr(r, "n_outliers", 0))
            out = f", {k} outlier(s) left out" if k else ""
            lines.append(
                f"  {r.language}: {r.kappa:.3f} [{r.ci_low:.3f}, {r.ci_high:.3f}]  R2={r.r2:.3f}  n={r.n}{out}"
            )
        for o in self.outliers.itertuples():
            lines.append(f"  left out: {o.language} {o.clip} ({o.duration_s:.1f} s, {o.tokens:g} tokens): {o.reason}")
        if len(self.outliers):
            lines.append(f"  ({self.rule})")
        for lang, why in self.skipped.items():
            lines.append(f"  {lang}: not fitted: {why}")
        if self.n_dropped:
            lines.append(f"  ({self.n_dropped} failed row(s) dropped)")
        return "\n".join(lines)


def _kappa_ratio(x: np.ndarray, y: np.ndarray) -> np.ndarray:
    """Ratio estimator along the last axis: sum(tokens) / sum(seconds)."""
    return y.sum(-1) / x.sum(-1)


def _clip_names(df: pd.DataFrame) -> pd.Series:
    """Each row's clip name: ``utt_id``, else ``key``, else the row label."""
    for c in ("utt_id", "key"):
        if c in df:
            return df[c].astype(str)
    return pd.Series(df.index.astype(str), index=df.index)


def fit_kappa(
    df: pd.DataFrame,
    *,
    tokens: str = "decode_steps",
    duration: str = "audio_s",
    n_boot: int = 2000,
    ci: float = 0.95,
    min_rows: int = 4,
    seed: int = 0,
    outlier_z: float | None = OUTLIER_Z,
    min_spread: float = MIN_SPREAD,
) -> KappaFit:
    """Fit ``tokens = kappa x duration`` per language: ``kappa = sum(tokens) / sum(duration)`` over the kept clips.

    This ratio estimator is the weighted least-squares fit through the origin for
    counts whose variance grows with duration (tokens behave like that), and it
    makes the predicted *total* work of the fitted rows exact — what a queue's
    mean service time depends on. It is also a sum, so one hallucinated clip with
    ten times its share of tokens can move it far: first, per language, the outlier
    rule of :mod:`asrsched.profiling.outliers` (a clip whose tokens per second lie more
    than ``outlier_z`` robust deviations from its language's median; ``min_spread``
    the smallest spread it assumes; ``outlier_z=None`` keeps every clip) finds such
    clips; they are left out of everything below, listed with their reason in
    ``outliers`` and counted per language in the table (``n_outliers``, their names in
    ``outliers``).

    Per language, on the kept clips: ``kappa``, a percentile bootstrap CI
    (:func:`asrsched.core.stats.percentile_ci` of ``n_boot`` resamples of the kept
    clips, level ``ci``; the rule is applied once, not per resample; every resample's
    kappa is a weighted mean of kept clips' rates, so the CI lies between their smallest
    and largest rate), ``r2`` (``1 - SS_res / SS_tot`` with ``SS_tot`` about the mean, so
    it is comparable with an ordinary R^2), the affine fit ``tokens = a + b x duration``
    for comparison, and the residual spread ``cv`` (std of tokens / (kappa x duration)).
    Only ``ok`` rows with finite values are used; a language with fewer than ``min_rows``
    of them, or fewer than ``min_rows`` left once its outliers are out, is listed in
    ``skipped`` with the reason (and a warning), never given a NaN kappa. If no language
    can be fitted, ``ValueError``; so are bad arguments (named), before any work.

    >>> rows = pd.DataFrame({"language": "en", "audio_s": [2.0, 4.0, 6.0, 8.0], "decode_steps": [9, 16, 25, 30]})
    >>> fit_kappa(rows, n_boot=200).kappa
    {'en': 4.0}
    """
    for c in (tokens, duration, "language"):
        if c not in df:
            raise ValueError(f"measurement table has no column {c!r}; tokens must be one of {', '.join(TOKEN_COLUMNS)}")
    if not (0 < ci < 1):
        raise ValueError(f"ci must be in (0, 1), got {ci!r}")
    if int(min_rows) != min_rows or min_rows < 2:
        raise ValueError(f"min_rows must be an integer >= 2, got {min_rows!r}")
    if not isinstance(n_boot, (int, np.integer)) or isinstance(n_boot, bool) or n_boot < 1:
        raise ValueError(f"n_boot must be an integer >= 1, got {n_boot!r}")
    check_rule(outlier_z, min_spread)
    ok = df["ok"].astype(bool) if "ok" in df else pd.Series(True, index=df.index)
    x_all = pd.to_numeric(df[duration], errors="coerce")
    y_all = pd.to_numeric(df[tokens], errors="coerce")
    good = ok & np.isfinite(x_all) & np.isfinite(y_all) & (x_all > 0)
    n_dropped = int((~good).sum())
    names = _clip_names(df)
    rng = np.random.default_rng(seed)
    rows, skipped, outliers = [], {}, []
    for lang in sorted(df["language"].astype(str).unique()):
        m = good & (df["language"].astype(str) == lang)
        n_good = int(m.sum())
        if n_good < min_rows:
            n_lang = int((df["language"].astype(str) == lang).sum())
            skipped[lang] = (
                f"only {n_good} good row(s) of {n_lang} (at least {min_rows} needed); measure more {lang!r} clips"
            )
            continue
        x, y = x_all[m].to_numpy(float), y_all[m].to_numpy(float)
        verdict = rate_outliers(x, y, outlier_z=outlier_z, min_spread=min_spread)
        out_idx = np.flatnonzero(verdict.outlier)
        for i in out_idx:
            label = m[m].index[i]
            outliers.append(
                dict(
                    language=lang,
                    clip=names.loc[label],
                    row=label,
                    duration_s=float(x[i]),
                    tokens=float(y[i]),
                    rate=float(verdict.rate[i]),
                    median_rate=verdict.median_rate,
                    z=float(verdict.z[i]),
                    reason=verdict.reason(int(i), float(outlier_z or 0)),
                )
            )
        keep = ~verdict.outlier
        n = int(keep.sum())
        if n < min_rows:
            skipped[lang] = (
                f"only {n} clip(s) left after leaving out {len(out_idx)} outlier(s) "
                f"({', '.join(names.loc[m[m].index[out_idx]])}; at least {min_rows} needed); "
                f"measure more {lang!r} clips"
            )
            continue
        x, y = x[keep], y[keep]
        k = float(_kappa_ratio(x, y))
        idx = rng.integers(0, n, size=(int(n_boot), n))
        lo, hi = percentile_ci(_kappa_ratio(x[idx], y[idx]), ci)
        resid = y - k * x
        ss_tot = float(((y - y.mean()) ** 2).sum())
        r2 = 1 - float((resid**2).sum()) / ss_tot if ss_tot > 0 else float("nan")
        b, a0 = np.polyfit(x, y, 1) if np.ptp(x) > 0 else (k, 0.0)
        rows.append(
            dict(
                language=lang,
                n=n,
                n_outliers=len(out_idx),
                outliers="; ".join(names.loc[m[m].index[out_idx]]),
                kappa=k,
                ci_low=lo,
                ci_high=hi,
                r2=r2,
                affine_intercept=float(a0),
                affine_slope=float(b),
                cv=float(np.std(y / (k * x), ddof=1)) if n > 1 else float("nan"),
                mean_duration_s=float(x.mean()),
                tokens=tokens,
                duration=duration,
            )
        )
    for lang, why in skipped.items():
        warnings.warn(f"kappa for {lang!r} not fitted: {why}", stacklevel=2)
    if not rows:
        raise ValueError(
            "no language has enough good rows to fit kappa: " + "; ".join(f"{k}: {v}" for k, v in skipped.items())
        )
    out = pd.DataFrame(outliers, columns=OUTLIER_COLUMNS)
    return KappaFit(pd.DataFrame(rows), skipped, n_dropped, tokens, duration, out, rule_text(outlier_z, min_spread))


# --------------------------------------------------------------------------- service model
def fit_service_model(
    df: pd.DataFrame,
    kappa: KappaFit,
    *,
    name: str = "profiled",
    batch: Sequence[dict] | pd.DataFrame | None = None,
    window_s: float | str = "fit",
    source: str = "",
    clock: str = "wall",
    extra_fit: dict | None = None,
) -> ServiceModel:
    """Fit the :class:`ServiceModel` from measured rows (``ok`` rows only).

    * ``encode_s_per_window`` = total encoder time / total encoder runs (measured directly);
    * ``decode_s_per_token`` and ``overhead_s``: non-negative least squares of
      ``total_s - windows(d) x encode_s_per_window`` on ``[kappa.tokens, 1]``
      (so the prediction ``windows x enc + tokens x step + overhead`` is unbiased on
      the training rows, whatever the backend does besides encode and decode);
    * ``decode_batch_slope`` from ``batch`` (rows ``batch, step_s`` as returned by
      ``FasterWhisperBackend.batch_step_times``; ``step_cpu_s`` on the cpu clock): least
      squares of ``step(b) / step(1) - 1 = slope x (b - 1)``; 0 when not measured;
    * ``kappa`` and ``kappa_ci`` from ``kappa``;
    * ``window_s``: a number, or ``"fit"`` (default): the effective audio advanced per
      encoder run, the largest ``w`` in 10-30 s for which ``ceil(d / w)`` best matches the
      measured encoder runs. faster-whisper seeks to the last complete segment, so a
      20-30 s clip often takes two runs (``w`` near 20 s); an engine that cuts fixed 30 s
      windows (vLLM) gives 30.

    ``clock="wall"`` (default) fits wall time (``total_s``, ``encode_s``, ``decode_s``);
    ``clock="cpu"`` fits process CPU time (``cpu_s``, ``encode_cpu_s``, ``decode_cpu_s``),
    which on a shared, loaded machine is the stable quantity: it approximates the wall
    time of the same engine on one dedicated core.
    """
    from scipy.optimize import nnls

    if clock not in CLOCKS:
        raise ValueError(f"clock must be one of {', '.join(CLOCKS)}; got {clock!r}")
    T, E, D = CLOCKS[clock]
    tok = kappa.tokens
    need = [T, E, "windows", "audio_s", tok]
    miss = [c for c in need if c not in df]
    if miss:
        raise ValueError(f"measurement table is missing column(s) {', '.join(miss)}")
    ok = df["ok"].astype(bool) if "ok" in df else pd.Series(True, index=df.index)
    d = df[ok & np.isfinite(df[need].astype(float)).all(axis=1)]
    n_dropped = int(len(df) - len(d))
    if len(d) < 3:
        raise ValueError(f"need at least 3 good rows to fit the service model, have {len(d)}")
    enc = float(d[E].sum() / max(d["windows"].sum(), 1))
    dur = d["audio_s"].to_numpy(float)
    runs = d["windows"].to_numpy(float)
    if window_s == "fit":
        grid = np.arange(30.0, 9.99, -0.5)  # largest first: ties keep the longer window
        sse = [float(((np.maximum(1, np.ceil(dur / w - 1e-9)) - runs) ** 2).sum()) for w in grid]
        window_s = float(grid[int(np.argmin(sse))])
    elif not (isinstance(window_s, (int, float)) and window_s > 0):
        raise ValueError(f"window_s must be a positive number of seconds or 'fit', got {window_s!r}")
    win = np.maximum(1, np.ceil(dur / float(window_s) - 1e-9))
    y = d[T].to_numpy(float) - enc * win
    A = np.c_[d[tok].to_numpy(float), np.ones(len(d))]
    (step, over), _ = nnls(A, y)
    pred = enc * win + A @ np.array([step, over])
    tot = d[T].to_numpy(float)
    ss_tot = float(((tot - tot.mean()) ** 2).sum())
    # decoder-only cross-check: decode_s = a + b x tokens
    dec_slope = (
        float(np.polyfit(d[tok].astype(float), d[D].astype(float), 1)[0])
        if np.ptp(d[tok]) > 0 and D in d and d[D].notna().all()
        else float("nan")
    )
    slope, batch_rows = 0.0, []
    if batch is not None and len(batch):
        bt = pd.DataFrame(batch)
        col = "step_cpu_s" if clock == "cpu" and "step_cpu_s" in bt and bt["step_cpu_s"].notna().all() else "step_s"
        s1 = float(bt.loc[bt["batch"] == bt["batch"].min(), col].iloc[0])
        bt["ratio"] = bt[col] / s1
        xb = bt["batch"].to_numpy(float) - bt["batch"].min()
        if (xb > 0).any():
            slope = max(0.0, float((xb * (bt["ratio"] - 1)).sum() / (xb * xb).sum()))
        batch_rows = bt.to_dict("records")
    fit = {
        "clock": clock,
        "n_rows": int(len(d)),
        "window_s": float(window_s),
        "window_mismatches": int((win != runs).sum()),
        "n_dropped": n_dropped,
        "tokens_column": tok,
        "duration_column": kappa.duration,
        "r2_total_s_measured_tokens": 1 - float(((tot - pred) ** 2).sum()) / ss_tot if ss_tot > 0 else None,
        "mape_total_s_measured_tokens": float(np.mean(np.abs(pred - tot) / tot)),
        "mean_total_s": float(tot.mean()),
        "decode_s_per_token_decoder_only": dec_slope,
        "kappa_table": kappa.table.to_dict("records"),
        "kappa_skipped": dict(kappa.skipped),
        "batch_step": batch_rows,
        **(extra_fit or {}),
    }
    return ServiceModel(
        encode_s_per_window=enc,
        decode_s_per_token=float(step),
        decode_batch_slope=slope,
        overhead_s=float(over),
        window_s=float(window_s),
        kappa=kappa.kappa,
        kappa_ci=kappa.ci,
        name=name + ("/cpu-time" if clock == "cpu" else ""),
        source=source,
        assumptions=(
            ("times are process CPU seconds (~ wall time on one dedicated core); " if clock == "cpu" else "")
            + f"kappa = {tok} per second of {kappa.duration} (decoder passes, temperature fallbacks included); "
            "encode_s_per_window = measured encoder time per encoder run; decode_s_per_token and overhead_s "
            "from a non-negative least-squares fit of total time; decode_batch_slope from batched generate "
            "timings (0 if not measured)"
        ),
        fit=fit,
    )


def split_holdout(
    df: pd.DataFrame, frac: float = 0.25, *, seed: int = 0, min_train: int = 4
) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Split ``ok`` rows into (train, held-back), per language, seeded; at least one held per language
    when it leaves ``min_train`` rows to fit. Failed rows go to train (fits drop them and count them)."""
    if not (0 <= frac < 1):
        raise ValueError(f"holdout frac must be in [0, 1), got {frac!r}")
    rng = np.random.default_rng(seed)
    held_idx = []
    ok = df["ok"].astype(bool)
    for lang in sorted(df["language"].astype(str).unique()):
        idx = df.index[ok & (df["language"].astype(str) == lang)].to_numpy()
        k = int(round(frac * len(idx)))
        if frac > 0 and k == 0 and len(idx) - 1 >= min_train:
            k = 1
        k = min(k, max(len(idx) - min_train, 0))
        held_idx.extend(rng.permutation(idx)[:k].tolist())
    held = df.loc[sorted(held_idx)]
    return df.drop(index=held.index), held


def validate_holdout(model: ServiceModel, held: pd.DataFrame, *, tokens: str = "kappa") -> dict:
    """Predict the held-back requests' mean service time and compare with the measured mean.

    ``tokens="kappa"`` (the real test): each request's tokens are what the profile
    predicts, ``round(kappa[lang] x audio_s)``; ``tokens=<column>`` uses the
    measured count (tests the time model alone). The requests run one at a time
    through :func:`asrsched.sim.engine.simulate` (``max_num_seqs=1``, arrivals far apart,
    so service time = finish - admit) when that module exists; otherwise through
    ``ServiceModel.service_time`` at batch 1, which is what the simulator reduces
    to for sequential requests. ``method`` says which.
    """
    h = held[held["ok"].astype(bool)] if "ok" in held else held
    if len(h) == 0:
        raise ValueError("no good held-back rows to validate on")
    dur = h["audio_s"].to_numpy(float)
    lang = h["language"].astype(str).to_numpy(object)
    if tokens == "kappa":
        tok = np.array([model.kappa_for(lg) * d for lg, d in zip(lang, dur)])
    else:
        if tokens not in h:
            raise ValueError(f"tokens must be 'kappa' or a column of the table, got {tokens!r}")
        tok = h[tokens].to_numpy(float)
    tok = np.maximum(1, np.rint(tok)).astype(np.int64)
    try:
        from asrsched.core.workloads import Trace
        from asrsched.sim.engine import simulate
    except ImportError:
        pred = np.array([model.service_time(d, lg, tokens=t) for d, lg, t in zip(dur, lang, tok)])
        method = "ServiceModel.service_time (batch 1)"
    else:
        gap = 10.0 * float(max(model.service_time(d, lg, tokens=t) for d, lg, t in zip(dur, lang, tok))) + 1.0
        tr = Trace(np.arange(len(h)) * gap, dur, lang, tok, meta=dict(workload="held-back profile rows"))
        rec = simulate(tr, "fcfs", model, max_num_seqs=1, warn_overload=False).records.sort_values("rid")
        pred = (rec["finish"] - rec["admit"]).to_numpy(float)
        method = "asrsched.sim.engine.simulate (fcfs, max_num_seqs=1, sequential arrivals)"
    clock = model.fit.get("clock", "wall") if model.fit else "wall"
    meas = h[CLOCKS[clock][0]].to_numpy(float)
    return {
        "clock": clock,
        "n": int(len(h)),
        "tokens": tokens,
        "method": method,
        "measured_mean_s": float(meas.mean()),
        "predicted_mean_s": float(pred.mean()),
        "rel_error": float(pred.mean() / meas.mean() - 1),
        "per_request_mape": float(np.mean(np.abs(pred - meas) / meas)),
        "per_language": {
            str(lg): {
                "n": int((lang == lg).sum()),
                "measured_mean_s": float(meas[lang == lg].mean()),
                "predicted_mean_s": float(pred[lang == lg].mean()),
            }
            for lg in pd.unique(lang)
        },
        "predicted": pred.tolist(),
    }


# --------------------------------------------------------------------------- silence / VAD
DURATION_SOURCES = {
    "file duration": "audio_s",
    "silero VAD": "vad_silero_s",
    "energy VAD": "vad_energy_s",
    "true speech": "speech_s",
}


def silence_estimates(df: pd.DataFrame, model: ServiceModel, *, tokens: str | None = None) -> pd.DataFrame:
    """Per request and duration source: estimated vs measured tokens and service time.

    Duration sources (:data:`DURATION_SOURCES`), what the size estimate multiplies by kappa: the file duration (the study's proxy), the
    silero and energy VAD speech durations, and the true speech duration (known
    for synthesised clips). Estimated tokens = ``kappa[lang] x d``; estimated
    time = ``model.service_time(audio_s, lang, tokens=...)`` (the encoder still
    sees the whole file), compared with the measured time on the model's clock
    (``measured_time_s``; ``total_s`` is the wall time the source's cost is set
    against). Errors are relative: estimate / measured - 1.
    """
    tok_col = tokens or model.fit.get("tokens_column", "decode_steps")
    d = df[df["ok"].astype(bool)].copy()
    out = []
    for source, col in DURATION_SOURCES.items():
        if col not in d:
            continue
        for r in d.itertuples():
            dur = getattr(r, col)
            if not (isinstance(dur, (int, float)) and math.isfinite(dur)) or r.language not in model.kappa:
                continue
            et = model.kappa_for(r.language) * dur
            st = model.service_time(r.audio_s, r.language, tokens=et)
            measured_t = getattr(r, CLOCKS[model.fit.get("clock", "wall")][0])
            meas_tok = getattr(r, tok_col)
            cost = getattr(r, f"{col[:-2]}_cost_s", 0.0) if col.startswith("vad_") else 0.0
            out.append(
                dict(
                    utt_id=r.utt_id,
                    key=r.key,
                    language=r.language,
                    silence=bool(r.silence),
                    duration_source=source,
                    duration_used_s=dur,
                    audio_s=r.audio_s,
                    est_tokens=et,
                    tokens=meas_tok,
                    tokens_rel_error=et / meas_tok - 1 if meas_tok else math.nan,
                    est_time_s=st,
                    measured_time_s=measured_t,
                    total_s=r.total_s,
                    time_rel_error=st / measured_t - 1,
                    duration_cost_s=cost,
                )
            )
    return pd.DataFrame(out)


def vad_summary(est: pd.DataFrame) -> pd.DataFrame:
    """Relative errors per (silence, duration source): mean signed (``*_bias``), mean absolute (``*_mae``)
    and median absolute (``*_median_ae``, robust to the odd temperature-fallback outlier), with each
    source's cost per request and that cost as a fraction of the inference time."""
    if est.empty:
        return pd.DataFrame()
    g = est.groupby(["silence", "duration_source"], sort=False)
    s = g.agg(
        n=("key", "size"),
        tokens_bias=("tokens_rel_error", "mean"),
        tokens_mae=("tokens_rel_error", lambda v: float(np.mean(np.abs(v)))),
        tokens_median_ae=("tokens_rel_error", lambda v: float(np.median(np.abs(v)))),
        time_bias=("time_rel_error", "mean"),
        time_mae=("time_rel_error", lambda v: float(np.mean(np.abs(v)))),
        time_median_ae=("time_rel_error", lambda v: float(np.median(np.abs(v)))),
        cost_ms=("duration_cost_s", lambda v: 1000 * float(np.mean(v))),
        inference_ms=("total_s", lambda v: 1000 * float(np.mean(v))),
    )
    s["cost_fraction"] = s["cost_ms"] / s["inference_ms"]
    return s.reset_index()
