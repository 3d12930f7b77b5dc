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
# # 02 · Policy sweep: FCFS vs SJF vs HRRN (and adaptive) in simulation
#
# Reproduces the main table of the duration-aware scheduling study (paper 1): the change of
# P50/P90 end-to-end latency (E2EL) and of time to first token (TTFT) against FCFS, for SJF and
# HRRN, over arrival rates 1–25 req/s, on the real LibriSpeech test-clean duration distribution and
# on the synthetic uniform 5–30 s split. The server is the event-driven continuous-batching simulator
# (`asrsched.sim.engine`), calibrated by a service-model profile (`asrsched.core.service`).

# %% [markdown]
# **Parameters** (override with papermill or `asrsched run 02 -p NAME VALUE`):
#
# | name | meaning |
# |---|---|
# | `RATES` | arrival rates swept (req/s) |
# | `POLICIES` | policies from the registry (`asrsched.core.policies.policy_names()`) |
# | `WORKLOADS` | duration sources: `librispeech`, `uniform`, `commonvoice_id`, `mix` |
# | `SEEDS` | one trace per seed; all policies replay the same trace |
# | `N_REQUESTS` | requests per run (like `vllm bench serve --num-prompts`) |
# | `MAX_NUM_SEQS` | concurrent sequences in the engine |
# | `PROFILE` | service-model JSON (from notebook 01); empty = the assumed Whisper-large-v3/A100 model |
# | `KAPPA` | override kappa (tokens per second of audio) for every language; `None` keeps the profile's |
# | `CDF_RATE` | rate at which latency CDFs and the P50/P90 trade-off are drawn |
# | `ADAPTIVE_CAPS` | `ratio_cap` values of the adaptive policy for the trade-off plot |
# | `N_JOBS`, `DASK_ADDRESS` | parallelism: joblib workers, or a Dask scheduler address (`"local"` for a local cluster) |
# | `CACHE_DIR` | parquet cache of finished points (resumable); `None` disables it |

# %% tags=["parameters"]
RATES = [1, 3, 5, 7, 9, 11, 13, 15, 17, 19, 21, 23, 25]
POLICIES = ["fcfs", "sjf", "hrrn", "adaptive"]
WORKLOADS = ["librispeech", "uniform"]
SEEDS = [0, 1, 2]
N_REQUESTS = 2000
MAX_NUM_SEQS = 32
PROFILE = ""
KAPPA = None
CDF_RATE = 21
ADAPTIVE_CAPS = [5, 20, 50, 200]
N_JOBS = 2
DASK_ADDRESS = None
CACHE_DIR = "../runs/sweep-cache"

# %%
import pandas as pd
from IPython.display import display

from asrsched.core.metrics import relative_change, summarize
from asrsched.core.service import ServiceModel, default_service_model
from asrsched.figures.sim import fig_cdf, fig_occupancy, fig_relative_change, fig_throughput, fig_tradeoff
from asrsched.figures.style import export_figure, export_session, export_table
from asrsched.sim.sweep import headline, point_records, run_sweep

NB = "02_policy_sweep"
service = ServiceModel.from_json(PROFILE) if PROFILE else default_service_model()
print(service.name, "|", service.assumptions or service.source)

# %%
df = run_sweep(RATES, POLICIES, WORKLOADS, SEEDS, n_requests=N_REQUESTS, max_num_seqs=MAX_NUM_SEQS,
               service=service, kappa=KAPPA, n_jobs=N_JOBS, address=DASK_ADDRESS, cache_dir=CACHE_DIR)
rc = relative_change(df, metrics=("p50_e2el_ms", "p90_e2el_ms", "mean_ttft_ms", "p50_ttft_ms"))
main_table = rc.pivot_table(index=["workload", "rate"], columns="policy",
                            values=["p50_e2el_ms_change_pct", "p90_e2el_ms_change_pct", "p50_ttft_ms_change_pct"])
main_table.round(0)

# %% [markdown]
# ## The study's headline numbers next to ours

# %%
hl = headline(rc)
display(hl)

# %%
at = CDF_RATE if CDF_RATE in set(df.rate) else float(df.rate.iloc[(df.rate - CDF_RATE).abs().argmin()])
recs = {w: point_records(w, at, POLICIES, n_requests=N_REQUESTS, max_num_seqs=MAX_NUM_SEQS, service=service,
                         kappa=KAPPA) for w in WORKLOADS}
variants = []
for w in WORKLOADS:
    for p in ("fcfs", "sjf", "hrrn"):
        variants.append({"workload": w, "policy": p, "label": p.upper(), **summarize(recs[w][p].records)})
    for cap in ADAPTIVE_CAPS:
        r = point_records(w, at, ["adaptive"], n_requests=N_REQUESTS, max_num_seqs=MAX_NUM_SEQS, service=service,
                          kappa=KAPPA, policy_params={"adaptive": {"ratio_cap": cap}})["adaptive"]
        variants.append({"workload": w, "policy": "adaptive", "label": f"adaptive cap={cap}",
                         **summarize(r.records)})
tradeoff = pd.DataFrame(variants)
tradeoff[["workload", "label", "p50_e2el_ms", "p90_e2el_ms", "max_queue_delay_ms"]].round(0)

# %%
figs = {}
for w in WORKLOADS:
    figs[f"relative_change_{w}"] = fig_relative_change(rc, workload=w)
    figs[f"cdf_e2el_{w}_rate{at:g}"] = fig_cdf({p: r.records for p, r in recs[w].items()})
    figs[f"cdf_e2el_{w}_rate{at:g}"].update_layout(title=figs[f"cdf_e2el_{w}_rate{at:g}"].layout.title.text
                                                 + f" — {w}, {at:g} req/s")
    figs[f"tradeoff_{w}_rate{at:g}"] = fig_tradeoff(tradeoff[tradeoff.workload == w], title_suffix=f" ({w}, {at:g} req/s)")
    figs[f"queue_depth_{w}_rate{at:g}"] = fig_occupancy({p: r.timeline for p, r in recs[w].items()})
figs["throughput"] = fig_throughput(df, workload=WORKLOADS[0])
with export_session():
    for name, fig in figs.items():
        export_figure(fig, name, NB)
export_table(rc, "relative_change", NB)
export_table(hl, "headline_vs_paper", NB)
export_table(tradeoff, "adaptive_tradeoff", NB)
export_table(df, "sweep_points", NB)
for name in ("relative_change_" + WORKLOADS[0], "cdf_e2el_" + WORKLOADS[0] + f"_rate{at:g}", "throughput"):
    figs[name].show()

# %% [markdown]
# ## What the numbers say

# %%
for _, r in hl.iterrows():
    print(f"{r.claim:<62} paper {r.paper_pct:+5.0f} %   here {r.ours_pct:+5.0f} % (at {r.at_rate:g} req/s)")
spread = df.groupby(["workload", "rate"]).request_throughput.agg(lambda s: (s.max() - s.min()) / s.mean() * 100)
print(f"throughput spread across policies: at most {spread.max():.1f} % (no throughput loss)")

# %% [markdown]
# ## Explore
# Move the sliders: the panel re-runs the same `point_records` call the batch path uses.

# %%
from asrsched.figures.widgets import policy_explorer

policy_explorer(rate=CDF_RATE, n_requests=min(N_REQUESTS, 1500), max_num_seqs=MAX_NUM_SEQS, service=service)
