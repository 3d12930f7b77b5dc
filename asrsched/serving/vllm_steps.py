"""The vLLM engine's service model, fitted from its own engine steps.

A request served alone (the probe) says nothing about batching; vLLM's cost is per **engine
step**: every step runs one decoder token for each sequence in the batch, and the encoder for
each request admitted in that step (one encoder input per audio window). The scheduler plug-in
logs every step (``step_log``: :func:`asrsched.vllm_plugin.scheduler.step_record`, the wall time
from the start of ``schedule`` to the output handed back). :func:`fit_step_model` fits, by
non-negative least absolute deviations over all steps (a median regression: steps slowed by another
process on the machine move it little),

    step_s = base + per_seq * n_seqs + encoder * n_encoder

and maps it onto the simulator's :class:`~asrsched.core.service.ServiceModel`:
``decode_s_per_token = base + per_seq`` (a step at batch 1), ``decode_batch_slope = per_seq /
(base + per_seq)`` (``step(b) = step(1) * (1 + slope * (b - 1))``) and ``encode_s_per_window =
encoder`` (an encoder run stalls the batch's step, as the simulator assumes). kappa (decoder
steps per second of audio) and the per-request overhead outside the engine (HTTP, audio
decoding in the API server) come from the caller's probe. :func:`step_time_table` is the
measurement behind the fit: the median step time per batch size, with and without an encoder run.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping, Sequence

import numpy as np
import pandas as pd

from asrsched.core.service import ServiceModel

__all__ = ["STEP_COLUMNS", "read_step_log", "select_steps", "step_time_table", "fit_step_model"]

#: the columns of one step-log line (``t`` is the wall clock, for joining with a run)
STEP_COLUMNS = ("t", "n_seqs", "n_new", "n_encoder", "n_tokens", "step_s")


def read_step_log(path: str | os.PathLike) -> pd.DataFrame:
    """The plug-in's JSON-lines step log as a table (:data:`STEP_COLUMNS`); steps that ran nothing are
    dropped. A missing file or one without a valid line raises ``ValueError`` naming the path."""
    rows = []
    try:
        with open(path) as fh:
            for line in fh:
                line = line.strip()
                if not line:
                    continue
                try:
                    rows.append(json.loads(line))
                except json.JSONDecodeError:
                    continue  # a line cut short when the engine stopped
    except OSError as e:
        raise ValueError(f"step log {path}: {e.strerror or e}") from None
    df = pd.DataFrame(rows)
    miss = set(STEP_COLUMNS) - set(df)
    if df.empty or miss:
        raise ValueError(
            f"step log {path} holds no step records" + (f" (missing {', '.join(sorted(miss))})" if len(df) else "")
        )
    df = df[list(STEP_COLUMNS)].astype(float)
    return df[(df["n_seqs"] > 0) & np.isfinite(df["step_s"]) & (df["step_s"] > 0)].reset_index(drop=True)


def select_steps(src: str | os.PathLike, dst: str | os.PathLike, windows: Sequence[tuple[float, float]]) -> int:
    """Copy the lines of the step log ``src`` whose step started (wall clock ``t``) inside one of ``windows``
    (``(start, end)`` pairs, ``time.time()`` on the same machine) to ``dst``; returns how many. How the
    real-engine study gives each phase (the probe, each policy's runs) its own log from its one engine's."""
    n = 0
    with open(src) as fh, open(dst, "w") as out:
        for line in fh:
            try:
                t = float(json.loads(line)["t"])
            except (json.JSONDecodeError, KeyError, TypeError, ValueError):
                continue  # a line cut short when the engine stopped
            if any(a <= t <= b for a, b in windows):
                out.write(line if line.endswith("\n") else line + "\n")
                n += 1
    return n


def step_time_table(steps: pd.DataFrame) -> pd.DataFrame:
    """Median, P10/P90 and count of the step time per batch size (``n_seqs``), for decode-only steps
    and for steps that ran the encoder (``encoder`` = number of encoder inputs, 0 for decode-only)."""
    d = steps.assign(encoder=steps["n_encoder"].astype(int), n_seqs=steps["n_seqs"].astype(int))
    g = d.groupby(["encoder", "n_seqs"])["step_s"]
    return pd.DataFrame(
        {"steps": g.size(), "median_step_s": g.median(), "p10_step_s": g.quantile(0.1), "p90_step_s": g.quantile(0.9)}
    ).reset_index()


def _nonnegative_lad(A: np.ndarray, y: np.ndarray) -> np.ndarray:
    """``x >= 0`` minimising ``sum |A x - y|``, exactly: the linear program ``min sum(u+ + u-)`` subject to
    ``A x + u+ - u- = y``, ``x, u+, u- >= 0`` (HiGHS, :func:`scipy.optimize.linprog`). Iteratively reweighted least
    squares from the least-squares fit could stop at its first non-improving step, still near the least-squares
    line that slow steps pull up (a CI run's batch-1 and batch-2 steps both fitted 35 % above their P95)."""
    from scipy.optimize import linprog
    from scipy.sparse import csr_matrix, eye, hstack

    n, k = A.shape
    c = np.concatenate([np.zeros(k), np.ones(2 * n)])
    a_eq = hstack([csr_matrix(A), eye(n, format="csr"), -eye(n, format="csr")], format="csr")
    res = linprog(c, A_eq=a_eq, b_eq=y, bounds=(0, None), method="highs")
    if not res.success:  # pragma: no cover - a feasible, bounded LP (x = 0 with u = |y| is feasible)
        raise RuntimeError(f"the step model's median regression failed: {res.message}")
    return np.asarray(res.x[:k], float)


def fit_step_model(
    steps: pd.DataFrame,
    *,
    kappa: Mapping[str, float],
    kappa_ci: Mapping | None = None,
    overhead_s: float = 0.0,
    name: str = "vLLM engine steps",
    window_s: float = 30.0,
    min_steps: int = 20,
) -> ServiceModel:
    """Fit ``step_s = base + per_seq * n_seqs + encoder * n_encoder`` (non-negative least absolute deviations:
    robust to steps slowed by another process) and return the :class:`ServiceModel` it implies (see the
    module docstring). ``fit`` holds the coefficients,
    the number of steps, the largest batch seen, the median absolute relative error per step, and
    :func:`step_time_table`. Raises ``ValueError`` with fewer than ``min_steps`` steps, without a
    step that ran the encoder, or without decode-only steps at two batch sizes (then the batch
    cost cannot be told from the fixed cost: keep the engine fuller while it is logged)."""
    if len(steps) < int(min_steps):
        raise ValueError(f"need at least {min_steps} engine steps to fit the step model, have {len(steps)}")
    enc = steps["n_encoder"].to_numpy(float)
    seqs = steps["n_seqs"].to_numpy(float)
    if not (enc > 0).any():
        raise ValueError("no logged step ran the encoder: the encoder cost cannot be fitted")
    dec_sizes = np.unique(seqs[enc == 0])
    if len(dec_sizes) < 2:
        raise ValueError(
            f"decode-only steps at {len(dec_sizes)} batch size(s) ({dec_sizes.tolist()}): the per-sequence "
            "cost cannot be told from the fixed step cost; log the engine with more requests in flight"
        )
    # least absolute deviations (median regression), not least squares: a step slowed by another process on
    # the machine (a spike of several times the typical step) moves it little, where least squares follows
    # the spikes. A linear program: min sum(u+ + u-) with A x + u+ - u- = y, x, u+, u- >= 0.
    A = np.column_stack([np.ones(len(steps)), seqs, enc])
    y = steps["step_s"].to_numpy(float)
    base, per_seq, encoder = _nonnegative_lad(A, y)
    step1 = base + per_seq
    if not step1 > 0:
        raise ValueError("the fitted step time at batch 1 is 0: the step log is degenerate")
    table = step_time_table(steps)
    pred = A @ np.array([base, per_seq, encoder])
    return ServiceModel(
        encode_s_per_window=float(encoder),
        decode_s_per_token=float(step1),
        overhead_s=float(max(0.0, overhead_s)),
        kappa=dict(kappa),
        kappa_ci=dict(kappa_ci or {}),
        decode_batch_slope=float(per_seq / step1),
        window_s=float(window_s),
        name=name,
        source="asrsched.serving.vllm_steps.fit_step_model (the plug-in's engine-step log)",
        assumptions="step = base + per_seq x sequences + encoder x encoder inputs (non-negative least absolute "
        "deviations over engine steps); decode_s_per_token = a step at batch 1; kappa and "
        "overhead from a probe of requests served alone",
        fit={
            "n_steps": int(len(steps)),
            "base_s": float(base),
            "per_seq_s": float(per_seq),
            "encoder_s": float(encoder),
            "max_batch": int(seqs.max()),
            "median_abs_rel_err": float(np.median(np.abs(pred - y) / y)),
            "step_time_table": table.to_dict("records"),
        },
    )
