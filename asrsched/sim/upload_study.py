"""Short requests beside long uploads: what each policy and chunk sizing does to both.

The traffic: LibriSpeech test-clean requests with a share ``upload_share`` of uploads of ``upload_lo_s`` to
``upload_hi_s`` seconds (uniform), at loads ρ of the engine's capacity on that traffic (measured with the
simulator under vLLM's chunking, :func:`asrsched.sim.uploads.chunk_capacity`). Each seed's trace runs under
every policy and every chunk sizing (:mod:`asrsched.core.uploads`) with vLLM's chunks submitted together (a
non-streamed request, ``chunks``) and one after another (a streamed request, ``streamed``), and under the CPU
server's behaviour (``sequence``: one job per upload, windows in sequence). Per run: the short
requests' (one window at most) P50/P90 E2EL and the uploads' P50/P90 E2EL, where an upload's E2EL ends at its
last chunk. :func:`upload_table` gives each against FCFS with chunk sizing as a paired change over seeds with a
95 % CI (:func:`asrsched.sim.sweep_report.change_ci`), and the medians themselves.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np
import pandas as pd

from asrsched.core.nudge import nudge_name, nudge_threshold
from asrsched.core.policies import validate_policies
from asrsched.core.service import as_service_model
from asrsched.core.uploads import SIZINGS, check_sizing
from asrsched.core.workloads import DurationSource, Mixture, Uniform, check_rhos, make_source, make_trace
from asrsched.sim.parallel import map_tasks
from asrsched.sim.sweep_report import change_ci
from asrsched.sim.uploads import chunk_capacity, simulate_uploads

__all__ = ["UploadStudyConfig", "upload_runs", "upload_table", "upload_source", "UPLOAD_METRICS"]

#: per run (ms): short requests' and uploads' E2EL percentiles
UPLOAD_METRICS = ("short_p50_e2el_ms", "short_p90_e2el_ms", "upload_p50_e2el_ms", "upload_p90_e2el_ms")


def upload_source(share: float, lo_s: float, hi_s: float) -> Mixture:
    """LibriSpeech test-clean with a share ``share`` of uploads uniform in ``[lo_s, hi_s]`` seconds."""
    libri = make_source("librispeech")
    assert isinstance(libri, DurationSource)  # a table of utterances, not a drift
    return Mixture([libri, Uniform(lo_s, hi_s, name="upload")], [1 - share, share], name="uploads")


@dataclass(frozen=True)
class UploadStudyConfig:
    """What :func:`upload_runs` sweeps."""

    rhos: tuple[float, ...] = (0.7, 0.8, 0.9, 0.95)
    upload_share: float = 0.02
    upload_lo_s: float = 60.0
    upload_hi_s: float = 600.0
    policies: tuple[str, ...] = ("fcfs", "sjf", "hrrn", "nudge_m4")
    sizings: tuple[str, ...] = SIZINGS
    streamed: bool = True
    sequence: bool = True
    seeds: int = 8
    n_requests: int = 3000
    max_num_seqs: int = 32
    service: dict | None = None  # a ServiceModel's to_dict() form; None: the default (A100) model

    def __post_init__(self) -> None:
        check_rhos(self.rhos, "rhos")
        if not 0 < self.upload_share < 1:
            raise ValueError(f"upload_share: must lie in (0, 1), got {self.upload_share!r}")
        if not (30 < self.upload_lo_s <= self.upload_hi_s and math.isfinite(self.upload_hi_s)):
            raise ValueError(
                f"upload_lo_s: need 30 s < upload_lo_s <= upload_hi_s (an upload is longer than one window), "
                f"got {self.upload_lo_s!r}, {self.upload_hi_s!r}"
            )
        for s in self.sizings:
            check_sizing(s, "sizings")
        if int(self.seeds) < 2 or int(self.n_requests) < 200:
            raise ValueError("seeds: need at least 2 (and n_requests at least 200)")
        if "fcfs" not in self.policies:
            raise ValueError("policies: FCFS is the baseline and must be one of them")
        try:
            validate_policies([p for p in self.policies if p != "nudge_m4"])
        except ValueError as e:
            raise ValueError(f"policies: {e}") from None

    def variants(self, nudge: str) -> list[tuple[str, str, str]]:
        """``(policy, mode, sizing)`` of every run of a seed; ``nudge_m4`` stands for ``nudge``."""
        modes = ("chunks", "streamed") if self.streamed else ("chunks",)
        out = [(nudge if p == "nudge_m4" else p, m, s) for m in modes for p in self.policies for s in self.sizings]
        if self.sequence:
            out += [(nudge if p == "nudge_m4" else p, "sequence", "upload") for p in self.policies]
        return out


def _one(*, cfg: dict, rho: float, rate: float, capacity: float, seed: int, nudge: str) -> list[dict]:
    kw: dict[str, Any] = {k: tuple(v) if isinstance(v, list) else v for k, v in cfg.items()}
    c = UploadStudyConfig(**kw)
    sm = as_service_model(c.service)
    src = upload_source(c.upload_share, c.upload_lo_s, c.upload_hi_s)
    tr = make_trace(src, rate=rate, n=c.n_requests, seed=seed, kappa=dict(sm.kappa))
    short = tr.duration <= sm.window_s
    up = tr.duration >= c.upload_lo_s
    rows = []
    for policy, mode, sizing in c.variants(nudge):
        _, recs = simulate_uploads(
            tr,
            policy,
            sm,
            mode=mode,
            sizing=sizing,
            max_num_seqs=c.max_num_seqs,
            warn_overload=False,
            timeline_points=0,
        )
        e = recs.e2el.to_numpy()
        rows.append(
            dict(
                workload="uploads",
                rho=float(rho),
                rate=float(rate),
                capacity_rps=float(capacity),
                seed=int(seed),
                policy=f"{policy}/{mode}/{sizing}",
                base_policy=policy,
                mode=mode,
                sizing=sizing,
                n_requests=c.n_requests,
                n_uploads=int(up.sum()),
                regime="stable" if rho < 1 else "overload",
                short_p50_e2el_ms=1e3 * float(np.percentile(e[short], 50)),
                short_p90_e2el_ms=1e3 * float(np.percentile(e[short], 90)),
                upload_p50_e2el_ms=1e3 * float(np.percentile(e[up], 50)) if up.any() else math.nan,
                upload_p90_e2el_ms=1e3 * float(np.percentile(e[up], 90)) if up.any() else math.nan,
                upload_max_e2el_ms=1e3 * float(e[up].max()) if up.any() else math.nan,
            )
        )
    return rows


def upload_runs(cfg: UploadStudyConfig, *, workers: int | None = None, progress: bool = True) -> pd.DataFrame:
    """Every run: one row per (ρ, seed, policy, mode, sizing); ``policy`` is ``<policy>/<mode>/<sizing>``."""
    sm = as_service_model(cfg.service)
    src = upload_source(cfg.upload_share, cfg.upload_lo_s, cfg.upload_hi_s)
    caps = []
    for s in range(3):  # the capacity under vLLM's chunks, every request arriving at once
        tr = make_trace(src, rate=1e6, n=max(cfg.n_requests, 2000), seed=90 + s, kappa=dict(sm.kappa))
        caps.append(chunk_capacity(tr, sm, max_num_seqs=cfg.max_num_seqs))
    cap = float(np.mean(caps))
    probe = make_trace(src, rate=1.0, n=4000, seed=7, kappa=dict(sm.kappa))
    short = probe.duration[probe.duration <= sm.window_s]
    nudge = nudge_name(round(nudge_threshold(sm.est_service(short, "en"), 0.5), 3), 4)
    d = asdict(cfg)
    tasks = [
        dict(cfg=d, rho=r, rate=r * cap, capacity=cap, seed=2000 + s, nudge=nudge)
        for r in cfg.rhos
        for s in range(int(cfg.seeds))
    ]
    rows: list[dict] = []
    for _, got in map_tasks(_one, tasks, workers=workers, progress=progress, desc="uploads"):
        rows.extend(got)
    return pd.DataFrame(rows).sort_values(["rho", "seed", "policy"], kind="stable").reset_index(drop=True)


def upload_table(runs: pd.DataFrame) -> pd.DataFrame:
    """Per (ρ, policy/mode/sizing): the mean of each metric over seeds and its change against FCFS with chunk
    sizing (paired over seeds, 95 % ratio CI); the largest upload E2EL over seeds."""
    base = "fcfs/chunks/chunk"
    t = change_ci(runs, UPLOAD_METRICS, baseline=base)
    g = runs.groupby(["rate", "policy"])
    for c in ("base_policy", "mode", "sizing"):
        t = t.merge(g[c].first().reset_index(), on=["rate", "policy"])
    t = t.merge(g.upload_max_e2el_ms.max().reset_index(), on=["rate", "policy"])
    return t.sort_values(["rho", "base_policy", "mode", "sizing"], kind="stable").reset_index(drop=True)
