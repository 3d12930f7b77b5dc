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
# # 05 · A/B-testing routing policies in queues: naive, DQ and mixed-DQ estimators
#
# Reproduces the estimator study of Jia, Johari, Si & Zheng (*Mixed Differences-in-Q estimators based on
# Little's law*, 2026; DQ from Farias, Li, Peng & Zheng, 2022) on a compiled supermarket model, and checks its
# headline claims from the numbers.
#
# **System** (`asrsched.abtest.model`): `N` FCFS servers, Poisson arrivals at total rate `N·λ`, each job routed on
# arrival by Power-of-d (sample `d` servers, join the shortest; `d = 1` random, `d = N` JSQ). The A/B test compares
# a control Power-of-d with a treatment Power-of-d (parameters `D1`, `D2`). The estimand is the **global treatment effect** (GTE) on mean
# response time, `W(treatment everywhere) − W(control everywhere)`, from long separate runs (with a CI).
#
# **Designs.** *Bernoulli*: each job gets the treatment policy with probability `p`; both arms share every server
# (Markovian interference). *Group*: the servers are split once into a treatment group of `round(p·N)` servers
# (evenly spaced in rate order, so both groups get the same mix of fast and slow servers) and a control group; each
# job joins the treatment group with probability `p` and is routed only among that group's servers by that group's
# policy — no interference, but each policy runs on a smaller system. *Switchback*: the whole system alternates
# between policies in time blocks (each block treated with probability `p`), dropping a burn-in at each block start.
#
# **Estimators** (`asrsched.abtest.estimators`, on a plain per-job trajectory): naive (difference of arm means),
# group, switchback, qDQ and wDQ (sum of the next `L` jobs' queue-length / response-time costs after each decision,
# difference of arm means; default `L = 30·N·λ`), and mixed DQ `α·wDQ + (1−α)·qDQ` with the minimum-variance `α`
# **estimated inside the experiment** from the covariance of wDQ and qDQ over contiguous batches (no truth, no
# other runs). qDQ's cost is the number in system seen at each arrival divided by `λ`; the scenario search below
# also tries its time-integral over the horizon ("qDQ (time-integral)"). The horizon sums come from prefix sums,
# so every `L` costs one O(n) pass. Each estimator gets a 95 % batch-means confidence interval from its single experiment; its coverage
# is measured over the replications. "mixed DQ (oracle α)" uses α from the covariance across replications — not
# available in practice, shown as the ceiling of the variance reduction.
#
# Scenarios: homogeneous; heterogeneous rates (half at 0.9, half at 1.3); cyclic arrival rate (±30 %, period 500);
# dispatcher delay (1 mean service time); constant service; Pareto service (tail index 2.5); a switchback design
# comparison (blocks 50/200/800, burn-in 0 or 25 %); and a small effect (Power-of-2 vs Power-of-3). The switchback
# comparison runs on the homogeneous system, so it shares that scenario's experiments and truth runs (its other
# estimators' rows are the homogeneous ones, the same numbers).
#
# **References** (the full list with titles: the README's References): Jia, Johari, Si & Zheng 2026
# (arXiv:2605.29641, mixed DQ); Farias, Li, Peng & Zheng 2022 (arXiv:2206.02371, DQ); Little 1961; Bojinov,
# Simchi-Levi & Zhao 2023 (switchbacks, arXiv:2009.00148); Mitzenmacher 2001 (Power-of-d).

# %% [markdown]
# **Parameters.** `QUICK`: `True` runs `REPS` replications per scenario and `TRUTH_REQUESTS_QUICK`-request truth runs;
# `False` runs the full study, `REPS_FULL` replications and `TRUTH_REQUESTS_FULL`-request truth runs (its measured time is in
# the committed full run's `run.json`, shown at the end). `N_SERVERS`, `LAM` (arrival rate per server λ, service
# rate 1), `D1` / `D2` (the `d` of the control / treatment Power-of-d; 1 = random), `P` (treatment probability),
# `N_REQUESTS` (requests per experiment after warm-up), `WP_REQUESTS` (requests per point of the W(p) curves),
# `L` (DQ horizon in jobs; 0 = `30·N·λ`), `BLOCK_LEN` / `BURN_IN` (switchback, time units), `SCENARIOS` (subset of
# the names above), `SEED`, `WORKERS` (parallel processes; 0 = all cores), `DASK_ADDRESS` (`None`, `"local"` or a
# scheduler address to fan the replications out on Dask), `FULL_RUN_DIR` (the committed full run read at the end,
# relative to the project folder).

# %% tags=["parameters"]
QUICK = True
REPS = 30
REPS_FULL = 100
TRUTH_REQUESTS_QUICK = 2_000_000
TRUTH_REQUESTS_FULL = 4_000_000
N_SERVERS = 20
LAM = 0.8
D1 = 1
D2 = 2
P = 0.5
N_REQUESTS = 500_000
L = 0
BLOCK_LEN = 200.0
BURN_IN = 50.0
SCENARIOS = [
    "homogeneous",
    "heterogeneous",
    "nonstationary",
    "delayed",
    "constant",
    "pareto",
    "switchback",
    "small_effect",
]
SEED = 0
WORKERS = 0
DASK_ADDRESS = None
WP_REQUESTS = 400_000
FULL_RUN_DIR = "figures/05_ab_estimators/full"

# %% tags=["checks"]
# The study's configuration, checked before any work: `asrsched run` and `asrsched dashboard` run this cell before
# they start anything, so a value out of range fails at once, naming the parameter.
from asrsched.abtest.model import SystemConfig
from asrsched.abtest.study import StudyConfig
from asrsched.app.params import named_as

with named_as(
    N_SERVERS="n_servers",
    LAM="lam",
    D1="control",
    D2="treatment",
    P="p",
    N_REQUESTS="n_requests",
    L="L",
    BLOCK_LEN="block_len",
    BURN_IN="burn_in",
    SCENARIOS="scenario",
    REPS="reps",
    TRUTH_REQUESTS_QUICK="truth_requests",
):
    base = SystemConfig(
        n_servers=N_SERVERS, lam=LAM, control=D1, treatment=D2, p=P, n_requests=N_REQUESTS, warmup_requests=20_000
    )
    study = StudyConfig(
        base=base,
        scenarios=tuple(SCENARIOS),
        reps=REPS if QUICK else REPS_FULL,
        L=L or None,
        block_len=BLOCK_LEN,
        burn_in=BURN_IN,
        truth_requests=TRUTH_REQUESTS_QUICK if QUICK else TRUTH_REQUESTS_FULL,
        seed=SEED,
    ).validate()

# %%
import json
import time

import pandas as pd
from IPython.display import Markdown, display

from asrsched.abtest.full_run import COST_LABELS, load_full_run, run_wp_curve, wp_table
from asrsched.abtest.study import SCENARIOS as SCENARIO_TEXT
from asrsched.abtest.study_report import (
    ESTIMATOR_LABELS,
    MIXED_MAP_DIR,
    ablation_table,
    claims_markdown,
    claims_table,
    coverage_table,
    load_mixed_map,
    mixed_map_statement,
    summary_table,
    switchback_table,
)
from asrsched.core.labels import router_label
from asrsched.core.provenance import describe
from asrsched.figures.ab_widgets import estimator_explorer
from asrsched.figures.abtest import (
    fig_ablation,
    fig_coverage,
    fig_estimates,
    fig_overview,
    fig_scenario,
    fig_search,
    fig_switchback,
    fig_wp,
)
from asrsched.figures.mixed_map import fig_mixed_map
from asrsched.figures.outputs import committed_path
from asrsched.figures.style import export_figure, export_session, export_table, setup
from asrsched.sim.parallel import run_study

setup()  # house template, figures laid out as exported, explorers that survive a saved page, progress bars
NB = "05_ab_estimators"
pd.set_option("display.precision", 4)
pd.set_option("display.width", 160)
print(
    f"{len(SCENARIOS)} scenarios x {study.reps} replications, {N_REQUESTS:,} requests per experiment, "
    f"L = {study.L_default}"
)
t0 = time.perf_counter()
res = run_study(study, workers=WORKERS or None, address=DASK_ADDRESS)
STUDY_SECONDS = time.perf_counter() - t0
print(f"study finished in {STUDY_SECONDS:.1f} s wall, {res.cpu_seconds:.1f} CPU-seconds over all tasks")

# %% [markdown]
# ## Ground truth and the Little's-law check
#
# `gte` is the difference of mean response times of long runs with one policy everywhere; `gte_q` is the same from
# the time-average number in system divided by the arrival rate (Little's law: they must agree). `slope` is
# `dW(p)/dp` of the mixed system at the experiment's `p`, measured from runs at `p ± 0.05`: this is what DQ
# estimates. Below: the largest relative Little's-law gap `λ̂·W̄ / X̄ − 1` over every simulated run.

# %%
display(res.truth.set_index("scenario"))
print(
    "max |Little's-law gap| over all experiment runs:",
    f"{res.little.rel_gap.abs().max():.2e}",
    "| over truth runs:",
    f"{res.truth_runs.little_rel_gap.abs().max():.2e}",
)

# %% [markdown]
# ## Bias, standard deviation and MSE per estimator and scenario
#
# Errors are against the truth; `sd_vs_naive` is the estimator's standard deviation over the naive one's;
# `coverage` is the fraction of the 95 % batch-means CIs that contain the truth, `coverage_of_mean` the fraction that
# contain the estimator's own mean over replications (it separates a wrong SE from a biased estimator), `se_ratio`
# the mean reported SE over the empirical sd, `alpha_mean` the mean in-experiment α of mixed DQ.

# %%
summary = summary_table(res)
map_dir = committed_path(MIXED_MAP_DIR)  # the committed mixed-DQ map: where the 2–5× claim holds (last section)
mixed_map = load_mixed_map(map_dir) if map_dir is not None else None
claims = claims_table(summary, res, mixed_map=mixed_map)
cols = [
    "scenario",
    "estimator",
    "truth",
    "mean",
    "bias",
    "bias_ci_lo",
    "bias_ci_hi",
    "sd",
    "rmse",
    "rmse_ci_lo",
    "rmse_ci_hi",
    "sd_vs_naive",
    "coverage",
    "coverage_of_mean",
    "se_ratio",
    "alpha_mean",
    "reps",
]
for s, g in summary.groupby("scenario", sort=False, observed=True):
    display(Markdown(f"**{s}** — {SCENARIO_TEXT[s]} ({int(g.reps.min())} replications; CIs are 95 %)"))
    display(g[cols[1:]].assign(estimator=g.estimator.map(ESTIMATOR_LABELS)).set_index("estimator"))

# %% [markdown]
# ## Why DQ is biased: W(p), the chord and the tangent
#
# `W(p)` is the mean response time of the mixed system when a fraction `p` of the jobs gets the treatment policy.
# The GTE is the chord `W(1) − W(0)`; DQ with Bernoulli(`p`) assignment estimates the tangent slope `dW/dp` at the
# experiment's `p`. Where `W(p)` is curved the two differ, and DQ stays biased however long the experiment runs.
# Each point below is one run of `WP_REQUESTS` requests (95 % CI bars); the tangent's slope is measured from runs at
# `p ± 0.05` (the truth table's `slope`).

# %%
curve = run_wp_curve(study, requests_per_point=WP_REQUESTS, workers=WORKERS or None, address=DASK_ADDRESS)
wp = wp_table(curve, res.truth, summary, study.base.p)
display(wp.set_index("scenario"))
fig_wp(curve, wp).show()

# %% [markdown]
# ## Do the study's claims hold here?
#
# Computed from the tables above (so it reflects whatever parameters this run used). Each claim gets a verdict per
# scenario: `holds` (its 95 % CI lies inside the claimed range), `fails` (outside) or `inconclusive` (straddles it).
# The mixed-DQ claim also gets its conditions from the committed mixed-DQ map (last section): the service laws,
# horizon units and α under which it holds here (`mixed_2_5x_holds_under`).

# %%
display(claims.set_index("scenario"))
display(Markdown(claims_markdown(claims, summary, res.truth, wp, mixed_map=mixed_map)))

# %% [markdown]
# ## L ablation, switchback designs, CI coverage

# %%
abl = ablation_table(res)
sbt = switchback_table(res)
cov = coverage_table(summary)
piv = abl[abl.scenario.astype(str) == SCENARIOS[0]].pivot(index="L", columns="estimator", values=["bias", "sd", "rmse"])
display(Markdown(f"**L ablation, {SCENARIOS[0]}** (default L = {study.L_default})"))
display(piv)
display(Markdown("**Switchback designs**"))
display(sbt)

# %% [markdown]
# ## Figures (exported with this run's outputs)

# %%
figs = {"overview": fig_overview(summary, claims), "coverage": fig_coverage(cov), "wp_curves": fig_wp(curve, wp)}
for s in SCENARIOS:
    figs[f"errors_{s}"] = fig_scenario(summary, s, claims)
for s in [x for x in ("homogeneous", "small_effect") if x in SCENARIOS]:
    figs[f"estimates_{s}"] = fig_estimates(res, s)
for s in [x for x in ("homogeneous", "constant") if x in SCENARIOS]:
    figs[f"ablation_{s}"] = fig_ablation(abl, s, study.L_default)
if "switchback" in SCENARIOS:
    figs["switchback_designs"] = fig_switchback(sbt)
with export_session():
    for name, f in figs.items():
        export_figure(f, name, NB)
    export_table(summary, "estimators", NB)
    export_table(claims, "claims", NB)
    export_table(res.truth, "truth", NB)
    export_table(abl, "ablation", NB)
    export_table(sbt, "switchback", NB)
    export_table(cov, "coverage", NB)
    export_table(curve, "wp_curve", NB)
    export_table(wp, "wp", NB)
    export_table(
        pd.DataFrame(
            [
                {
                    "study_seconds": STUDY_SECONDS,
                    "cpu_seconds": res.cpu_seconds,
                    "reps": study.reps,
                    "quick": QUICK,
                    "n_requests": N_REQUESTS,
                    "scenarios": len(SCENARIOS),
                }
            ]
        ),
        "run",
        NB,
    )
for name in ("overview", f"errors_{SCENARIOS[0]}", "coverage"):
    figs[name].show()
if "switchback" in SCENARIOS:
    figs["switchback_designs"].show()
if "homogeneous" in SCENARIOS:
    figs["ablation_homogeneous"].show()
    figs["estimates_homogeneous"].show()

# %% [markdown]
# ## Explore
#
# Sliders for `λ`, the control's and the treatment's Power-of-d, `p`, `L` and `N` rerun a small one-scenario study
# (same code path as above; the title states its number of replications) and redraw every estimator's replications
# against the truth (green line).

# %%
estimator_explorer(
    lam=LAM,
    d1=D1,
    d2=D2,
    p=P,
    L=L,
    n_servers=N_SERVERS,
    reps=min(REPS, 6),
    n_requests=min(N_REQUESTS, 100_000),
    scenario=SCENARIOS[0],
    block_len=BLOCK_LEN,
    burn_in=BURN_IN,
    seed=SEED,
)

# %% [markdown]
# ## Reading: the committed full study
#
# The full study (100 replications per scenario and the scenario search) is too long for a default run. Its results
# are committed under `FULL_RUN_DIR` with a `run.json` (commit, date, CPU model, load average, parameters and the
# exact command that regenerates them: `python -m asrsched.abtest.full_run --full --out figures/05_ab_estimators/full`).
# Everything below is read from those files; no number in this section is typed in. Its figures are exported as
# `full_study_overview`, `full_study_wp` and `full_study_search` (the gallery links them beside the files).

# %%
full_dir = committed_path(FULL_RUN_DIR)
try:
    fr = load_full_run(full_dir) if full_dir is not None else None
except FileNotFoundError as err:
    fr = None
    print(err)
if fr is None:
    display(Markdown(f"No committed full run found at `{FULL_RUN_DIR}` (outside a checkout); see the command above."))
else:
    r, prm = fr.run, fr.run["parameters"]["study"]
    tm = r["timings"]
    display(
        Markdown(
            f"Shown: `{FULL_RUN_DIR}/`, {describe(r)}. "
            f"{prm['reps']} replications per scenario, {prm['base']['n_requests']:,} jobs per experiment, truth runs of "
            f"{prm['truth_requests']:,} jobs × {prm['truth_seeds']}; N = {prm['base']['n_servers']}, "
            f"λ = {prm['base']['lam']:g}, p = {prm['base']['p']:g}. The study took {tm['study_seconds']:.0f} s wall "
            f"({tm['study_cpu_seconds']:.0f} CPU-seconds over all tasks) on that machine."
        )
    )
    display(Markdown((fr.folder / "claims.md").read_text()))
    export_figure(fig := fig_overview(fr.summary, fr.claims), "full_study_overview", NB)
    fig.show()
    export_figure(fig := fig_wp(fr.wp_curve, fr.wp, prm["base"]["p"]), "full_study_wp", NB)
    fig.show()

# %% [markdown]
# ### Where does mixed DQ gain most? (the scenario search)
#
# The study reports mixed DQ 2–5× lower sd than qDQ / wDQ. The search runs replications of the Bernoulli experiment
# over per-server load λ, policy pair, horizon `L` and the cost definition of the queue-length side (queue length
# at arrivals vs its time-integral over the horizon) and reports the gain `min(sd wDQ, sd qDQ) / sd(mixed DQ)` with
# a 95 % bootstrap CI.

# %%
if fr is not None:
    sr = fr.search
    top = sr.iloc[0]
    n_claim = int((sr.gain_ci_lo >= 2).sum())
    n_above1 = int((sr.gain_ci_lo > 1).sum())
    display(
        Markdown(
            f"{len(sr)} cells, {int(sr.reps.min())} replications each. Largest gain: **{top.gain:.2f}×** "
            f"(95 % CI {top.gain_ci_lo:.2f}–{top.gain_ci_hi:.2f}) at λ = {top.lam:g}, {router_label(top.control)} → "
            f"{router_label(top.treatment)}, "
            f"L = {int(top.L)} ({top.L_factor:g} × 30·N·λ), {COST_LABELS[top.cost]}; there wDQ and qDQ correlate "
            f"{top['corr']:.3f} across replications, which caps any fixed-α mix at {top.gain_bound:.2f}×. "
            f"Cells whose CI lies at or above 2×: {n_claim} of {len(sr)}; cells whose CI lies above 1× (any gain): "
            f"{n_above1}."
        )
    )
    display(sr.head(10))
    export_figure(fig := fig_search(sr), "full_study_search", NB)
    fig.show()

# %% [markdown]
# ### Where mixed DQ pays (the mixed-DQ map)
#
# The claim "mixed DQ has 2–5× lower sd than DQ" depends on the service-time variability, on how the DQ horizon is
# counted and on how α is estimated. The committed map (`asrsched.abtest.mixed_map`; regenerate with
# `python -m asrsched.abtest.mixed_map --out figures/05_ab_estimators/mixed_map --reps 300 --more-reps const=2000
# --more-reps erlang4=1000`) runs one Bernoulli experiment per replication and service law (deterministic,
# Erlang-4, Pareto 2.5, exponential, hyperexponential with SCV 4; N = 20, λ = 0.8, random → Power-of-2, p = 0.5)
# and computes on that same trajectory wDQ, qDQ and mixed DQ with the horizon counted in jobs (`L`) or in time
# (`τ = L/(N·λ)`), at `L` = 0.3, 1 and 3 × 30·N·λ, with α from batch means, from the per-job Q values centred per arm,
# or (reference) from the replications' covariance. Gains are `min(sd wDQ, sd qDQ) / sd(mixed)` ("over the better")
# and `max(...) / sd(mixed)` ("over the worse"), with 95 % bootstrap CIs over replications; the verdict is the
# study's claim over the better DQ. Everything below is read from the committed files.

# %%
if mixed_map is None:
    display(Markdown(f"No committed mixed-DQ map found at `{MIXED_MAP_DIR}`; see the command above."))
else:
    map_run = json.loads((map_dir / "run.json").read_text())
    display(Markdown(f"Shown: `{MIXED_MAP_DIR}/`, {describe(map_run)}."))
    display(Markdown(mixed_map_statement(mixed_map)))
    export_figure(fig := fig_mixed_map(mixed_map), "mixed_map", NB)
    fig.show()
    cols = ["law", "scv", "unit", "L_factor", "alpha", "gain_better", "gain_better_ci_lo", "gain_better_ci_hi"]
    cols += ["gain_worse", "gain_worse_ci_lo", "gain_worse_ci_hi", "verdict", "vs_batch", "alpha_mean", "reps"]
    display(mixed_map[cols].set_index(["law", "unit", "L_factor", "alpha"]))
