"""Calibration on a real server: the closed-loop probe and the service model fitted to it.

:func:`probe` sends a workload's requests one after another (closed loop) to a FCFS server;
:func:`calibrate` fits a :class:`~asrsched.core.service.ServiceModel` to the server's own records
(kappa by :func:`asrsched.profiling.fit.fit_kappa`, encoder and step time by non-negative least
squares); :func:`client_tokens` counts decoder steps from the returned text where the server
reports none (vLLM); :func:`engine_step_model` fits a batching engine's step costs from the
plug-in's step log (:mod:`asrsched.serving.vllm_steps`).
"""

from __future__ import annotations

import os

import numpy as np
import pandas as pd

from asrsched.core.service import ServiceModel
from asrsched.core.workloads import make_trace
from asrsched.serving.loadgen import run_coro, run_load
from asrsched.serving.request_plan import plan_requests
from asrsched.serving.servers import server_records

__all__ = ["probe", "calibrate", "client_tokens", "engine_step_model"]


def calibrate(
    records: pd.DataFrame, *, name: str = "calibrated on the server", n_boot: int = 500, seed: int = 0
) -> ServiceModel:
    """Fit the :class:`ServiceModel` from server-side records of requests served one at a time.

    ``records`` needs ``duration, language, tokens`` (decoder steps) and ``admit, finish``
    (or ``service_s``); ``windows`` defaults to ``ceil(duration / 30)``. kappa per
    language is :func:`asrsched.profiling.fit.fit_kappa` (tokens per second of audio);
    ``encode_s_per_window`` and ``decode_s_per_token`` are the non-negative least
    squares fit of the service time (admission to completion, everything that holds
    the worker) on ``[windows, tokens]``. ``overhead_s`` is the median of
    ``client_e2el - server_e2el`` when the records carry ``client_e2el`` (HTTP and
    upload time outside the server's clock), else 0.
    """
    from scipy.optimize import nnls

    from asrsched.profiling.fit import fit_kappa

    need = {"duration", "language", "tokens"}
    miss = need - set(records)
    if miss:
        raise ValueError(f"records are missing column(s) {', '.join(sorted(miss))}")
    d = records.copy()
    if "service" not in d:
        d["service"] = d["finish"] - d["admit"] if {"finish", "admit"} <= set(d) else d["service_s"]
    if "windows" not in d or not np.isfinite(d["windows"].to_numpy(float)).all():
        d["windows"] = np.maximum(1, np.ceil(d["duration"].to_numpy(float) / 30.0 - 1e-9))
    ok = np.isfinite(d[["duration", "tokens", "service", "windows"]].astype(float)).all(axis=1)
    d = d[ok]
    if len(d) < 4:
        raise ValueError(f"need at least 4 completed requests with tokens and times to calibrate, have {len(d)}")
    kf = fit_kappa(
        d.assign(audio_s=d["duration"], decode_steps=d["tokens"]),
        tokens="decode_steps",
        duration="audio_s",
        n_boot=n_boot,
        seed=seed,
        min_rows=3,  # four requests suffice: one of them may be left out as a hallucinated clip (profiling.outliers)
    )
    A = d[["windows", "tokens"]].to_numpy(float)
    y = d["service"].to_numpy(float)
    (enc, step), _ = nnls(A, y)
    pred = A @ np.array([enc, step])
    over = 0.0
    if "client_e2el" in d and "server_e2el" in d:
        gap = (d["client_e2el"] - d["server_e2el"]).to_numpy(float)
        gap = gap[np.isfinite(gap)]
        if len(gap):
            over = max(0.0, float(np.median(gap)))
    return ServiceModel(
        encode_s_per_window=float(enc),
        decode_s_per_token=float(step),
        overhead_s=over,
        kappa=kf.kappa,
        kappa_ci=kf.ci,
        name=name,
        source="asrsched.serving.calibration.calibrate (closed-loop probe of the real server)",
        assumptions="service = windows x encode + decoder steps x step (NNLS on server-side admission-to-completion "
        "times); kappa = decoder steps per second of audio; overhead = client minus server latency",
        fit={
            "n": int(len(d)),
            "mape": float(np.mean(np.abs(pred - y) / y)),
            "mean_service_s": float(y.mean()),
            "kappa_table": kf.table.to_dict("records"),
        },
    )


def probe(
    url: str,
    workload: str = "librispeech",
    *,
    n: int = 6,
    seed: int = 0,
    slots: int = 1,
    model: str = "tiny.en",
    pool_size: int = 24,
    cache=None,
    stream: bool = True,
    progress: bool = True,
) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Closed-loop probe: ``n`` requests of ``workload``, ``slots`` at a time, as fast as served.

    Returns ``(client_records, server_records)``; the server records are joined with the
    client's E2EL (``client_e2el``, ``server_e2el``) for :func:`calibrate`. Clips are
    chosen spread over the workload's duration range (every ``n``-quantile).
    """
    if int(n) < 4:
        raise ValueError(f"n (probe requests) must be an integer >= 4, got {n!r}")
    tr = make_trace(workload, rate=1.0, n=max(200, 10 * n), seed=seed + 7919)
    plan_all = plan_requests(tr, pool_size=pool_size, seed=seed, cache=cache, progress=progress)
    q = np.quantile(plan_all["duration"], np.linspace(0.05, 0.95, n))
    idx = [int(np.argmin(np.abs(plan_all["duration"].to_numpy() - x))) for x in q]
    plan = plan_all.iloc[idx].assign(scheduled=0.0, rid=np.arange(n)).reset_index(drop=True)
    rec = run_coro(
        run_load(url, plan, model=model, stream=stream, max_concurrency=slots, label="probe", progress=progress)
    )
    srv = pd.DataFrame()
    with _suppress_http():
        srv = server_records(url)
    if len(srv) and rec["server_rid"].notna().any():
        m = rec[["server_rid", "e2el"]].dropna().astype({"server_rid": int})
        srv = srv.merge(m.rename(columns={"server_rid": "rid", "e2el": "client_e2el"}), on="rid", how="inner")
        srv["server_e2el"] = srv["finish"] - srv["arrival"]
    return rec, srv


def client_tokens(records: pd.DataFrame, model: str = "tiny.en") -> np.ndarray:
    """Decoder steps per request as a client sees them: the response's ``text_tokens`` where the server
    reported it, else the returned text tokenised with the Whisper tokenizer of ``model``
    (:func:`asrsched.profiling.text_kappa.count_tokens`; ``base`` for a model name it does not know),
    plus one step for the end token. NaN for a request without text."""
    from asrsched.profiling.text_kappa import count_tokens, whisper_text
    from asrsched.whisper.weights import MODELS

    rep = records["text_tokens"].to_numpy(float) if "text_tokens" in records else np.full(len(records), np.nan)
    texts = records["text"] if "text" in records else pd.Series([None] * len(records))
    has = texts.notna().to_numpy() & np.isnan(rep)
    out = rep + 1.0
    if has.any():
        tok = model if model in MODELS else "base"
        out[has] = count_tokens([whisper_text(t) for t in texts[has]], tok) + 1.0
    return out


class _suppress_http:
    def __enter__(self):
        return self

    def __exit__(self, et, ev, tb):
        import httpx

        return et is not None and issubclass(et, httpx.HTTPError)


def engine_step_model(
    step_log: str | os.PathLike,
    probe_model: ServiceModel,
    probe_records: pd.DataFrame,
    *,
    name: str = "vLLM engine steps",
) -> ServiceModel:
    """The :class:`ServiceModel` of a batching engine: step costs from its step log
    (:func:`asrsched.serving.vllm_steps.fit_step_model`), kappa from the probe's calibration, and the
    overhead outside the engine as the median over probe requests (served alone) of their client
    E2EL minus the step model's service time."""
    from asrsched.serving.vllm_steps import fit_step_model, read_step_log

    m = fit_step_model(read_step_log(step_log), kappa=probe_model.kappa, kappa_ci=probe_model.kappa_ci, name=name)
    pr = probe_records.dropna(subset=["e2el", "tokens", "duration"])
    if len(pr):  # the engine's time of each probe request alone (batch 1; the fitted model's overhead is 0)
        svc = np.asarray(m.service_time(pr["duration"].to_numpy(float), tokens=pr["tokens"].to_numpy(float)))
        over = float(np.median(pr["e2el"].to_numpy(float) - svc))
        m = ServiceModel.from_dict({**m.to_dict(), "overhead_s": max(0.0, over)}, origin=name)
    return m
