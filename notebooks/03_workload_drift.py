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
# watch rolling P50/P90 E2EL per policy. Each phase's load is stated as `rho` = rate / that workload's
# measured capacity (`asrsched.sim.capacity`); a phase at `rho >= 1` is an overload, where the queue grows
# for as long as the phase lasts and latencies depend on its length. Without a `PROFILE` the service
# model is the **assumed** Whisper-large-v3/A100 one (`default_service_model()`, not measured here).
#
# **References** (the full list with titles: the README's References): Makwana et al. 2026 (arXiv:2603.11273, the
# scheduling study and its workload drift); Brinch Hansen 1971 (HRRN).

# %% [markdown]
# **Parameters**
#
# | name | meaning |
# |---|---|
# | `RATE` | arrival rate (req/s); each phase's load `rho` is printed below |
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

# %% tags=["checks"]
# The drift schedules and run, checked before any work: `asrsched run` and `asrsched dashboard` run this cell
# before they start anything, so a value out of range fails at once, naming the parameter.
from asrsched.app.params import named_as
from asrsched.core.workloads import Drift, make_source
from asrsched.sim.sweep import check_sweep_params

with named_as(
    RATE="rate",
    RAMP_S=("ramp_s", "drift ramp_s"),
    PHASES=("phases", "phase", "unknown workload", "drift"),
    N_REQUESTS="n_requests",
    SEEDS="seeds",
    POLICIES="unknown policy",
    MAX_NUM_SEQS="max_num_seqs",
    WINDOW_S="window_s",
):
    check_sweep_params([RATE], POLICIES, [], [SEED], N_REQUESTS, MAX_NUM_SEQS)
    if not (isinstance(WINDOW_S, (int, float)) and WINDOW_S > 0):
        raise ValueError(f"WINDOW_S must be a positive number of seconds, got {WINDOW_S!r}")
    names = [f"{w} from {t:g} s" for t, w in PHASES]
    schedules = {
        "abrupt": Drift([(float(t), make_source(w)) for t, w in PHASES], ramp_s=0.0),
        "gradual": Drift([(float(t), make_source(w)) for t, w in PHASES], ramp_s=RAMP_S),
    }

# %%
import pandas as pd

from asrsched.core.service import ServiceModel, default_service_model
from asrsched.figures.sim import fig_drift, service_note
from asrsched.figures.style import export_figure, export_session, export_table, setup
from asrsched.sim.drift import drift_records, phase_loads, phase_table

setup()  # house template, figures laid out as exported, explorers that survive a saved page, progress bars
NB = "03_workload_drift"
service = ServiceModel.from_json(PROFILE) if PROFILE else default_service_model()
loads = phase_loads(schedules["abrupt"], RATE, service=service, max_num_seqs=MAX_NUM_SEQS, phase_names=names)
print(service_note(service.name))
for _, r in loads.iterrows():
    print(f"{r.phase}: rho {r.rho:.2f} ({RATE:g} req/s / capacity {r.capacity_rps:.2f} req/s), {r.regime}")

# %%
results = {
    kind: drift_records(d, RATE, POLICIES, n_requests=N_REQUESTS, seed=SEED, max_num_seqs=MAX_NUM_SEQS, service=service)
    for kind, d in schedules.items()
}
table = pd.concat([phase_table(r, names).assign(drift=kind) for kind, r in results.items()], ignore_index=True)
table.pivot_table(index=["drift", "phase"], columns="policy", values="p90_e2el_s").round(2)

# %%
figs = {}
for kind, res in results.items():
    sub = (
        f"{kind} drift at {RATE:g} req/s; "
        + ", ".join(f"{w} ρ = {x:.2f}" for w, x in loads.groupby("workload", sort=False).rho.first().items())
        + f"; one run of {N_REQUESTS} requests<br>{service_note(service.name)}"
    )
    f = fig_drift(res, window_s=WINDOW_S, phase_marks=[float(t) for t, _ in PHASES[1:]], subtitle=sub)
    figs[f"drift_{kind}"] = f
with export_session():
    for name, f in figs.items():
        export_figure(f, name, NB)
export_table(table.assign(service_model=service.name), "phase_latency", NB)
figs["drift_abrupt"].show()

# %% [markdown]
# ## What the numbers say

# %%
# one run per policy: values with the phase's load and number of requests, no winner named (no CI)
p90 = table.pivot_table(index=["drift", "phase"], columns="policy", values="p90_e2el_s")
n = table.groupby(["drift", "phase"]).requests.first()
rho = loads.set_index("phase").rho
for (kind, ph), row in p90.iterrows():
    print(
        f"{kind:8s} {ph:28s} (rho {rho[ph]:.2f}, n = {n[(kind, ph)]}) P90 E2EL: "
        + ", ".join(f"{p} {v:6.1f} s" for p, v in row.items())
    )
worst = table.groupby(["drift", "policy"]).p90_e2el_s.max().unstack()
print("\nworst-phase P90 (s):\n", worst.round(1).to_string())

# %% [markdown]
# ## Explore
# Move the rate and the ramp length; the panel replays the drift with every policy.

# %%
from asrsched.figures.widgets import drift_explorer

drift_explorer(
    rate=RATE,
    ramp_s=RAMP_S,
    phases=PHASES,
    n_requests=N_REQUESTS,
    seed=SEED,
    policies=POLICIES,
    max_num_seqs=MAX_NUM_SEQS,
    service=service,
    window_s=WINDOW_S,
)
