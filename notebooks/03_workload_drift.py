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
# # 03 · Workload drift: latency over time while the duration mix changes
#
# The study's motivation: under FCFS, when the mix of request durations shifts toward long audio
# (workload drift), head-of-line blocking makes queueing delay explode. Here a LibriSpeech stream drifts
# to the uniform 5–30 s split and back, once abruptly and once gradually, at a fixed arrival rate, and we
# watch rolling P50/P90 E2EL per policy.

# %% [markdown]
# **Parameters**
#
# | name | meaning |
# |---|---|
# | `RATE` | arrival rate (req/s); LibriSpeech alone is below capacity, the uniform split above it |
# | `PHASES` | `[start_s, workload]` pairs of the drift schedule |
# | `RAMP_S` | gradual drift: seconds over which the mix blends into the next phase (the abrupt run uses 0) |
# | `N_REQUESTS`, `SEED` | trace length and seed (all policies replay the same trace) |
# | `POLICIES`, `MAX_NUM_SEQS`, `PROFILE` | as in notebook 02 |
# | `WINDOW_S` | width of the rolling window for latency over time |

# %% tags=["parameters"]
RATE = 10.0
PHASES = [[0, "librispeech"], [200, "uniform"], [450, "librispeech"]]
RAMP_S = 120.0
N_REQUESTS = 7000
SEED = 0
POLICIES = ["fcfs", "sjf", "hrrn", "adaptive"]
MAX_NUM_SEQS = 32
PROFILE = ""
WINDOW_S = 20.0

# %%
import pandas as pd

from asrsched.core.service import ServiceModel, default_service_model
from asrsched.core.workloads import Drift, make_source
from asrsched.figures.sim import fig_drift
from asrsched.figures.style import export_figure, export_session, export_table
from asrsched.sim.sweep import drift_records, phase_table

NB = "03_workload_drift"
service = ServiceModel.from_json(PROFILE) if PROFILE else default_service_model()
names = [f"{w} from {t:g} s" for t, w in PHASES]
schedules = {
    "abrupt": Drift([(float(t), make_source(w)) for t, w in PHASES], ramp_s=0.0),
    "gradual": Drift([(float(t), make_source(w)) for t, w in PHASES], ramp_s=RAMP_S),
}

# %%
results = {kind: drift_records(d, RATE, POLICIES, n_requests=N_REQUESTS, seed=SEED, max_num_seqs=MAX_NUM_SEQS,
                               service=service) for kind, d in schedules.items()}
table = pd.concat([phase_table(r, names).assign(drift=kind) for kind, r in results.items()], ignore_index=True)
table.pivot_table(index=["drift", "phase"], columns="policy", values="p90_e2el_s").round(2)

# %%
figs = {}
for kind, res in results.items():
    f = fig_drift(res, window_s=WINDOW_S, phase_marks=[float(t) for t, _ in PHASES[1:]])
    f.update_layout(title=f.layout.title.text + f" — {kind} drift at {RATE:g} req/s")
    figs[f"drift_{kind}"] = f
with export_session():
    for name, f in figs.items():
        export_figure(f, name, NB)
export_table(table, "phase_latency", NB)
figs["drift_abrupt"].show()

# %% [markdown]
# ## What the numbers say

# %%
p90 = table.pivot_table(index=["drift", "phase"], columns="policy", values="p90_e2el_s")
for (kind, ph), row in p90.iterrows():
    best = row.idxmin()
    print(f"{kind:8s} {ph:28s} P90 E2EL: " + ", ".join(f"{p} {v:6.1f} s" for p, v in row.items())
          + f"  -> best {best}")
worst = table.groupby(["drift", "policy"]).p90_e2el_s.max().unstack()
print("\nworst-phase P90 (s):\n", worst.round(1).to_string())

# %% [markdown]
# ## Explore
# Move the rate and the ramp length; the panel replays the drift with every policy.

# %%
from asrsched.figures.widgets import drift_explorer

drift_explorer(rate=RATE, ramp_s=RAMP_S, n_requests=min(N_REQUESTS, 2500), max_num_seqs=MAX_NUM_SEQS,
               service=service)
