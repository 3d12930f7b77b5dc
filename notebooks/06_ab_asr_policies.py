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
# # 06 · A/B-testing ASR routing and scheduling policies on a multi-replica fleet
#
# *If I roll out duration-aware routing or scheduling across my ASR fleet, what will the A/B test say, and which
# estimator should I trust?* This notebook joins the two source studies. The queueing system is a fleet of
# continuous-batching Whisper replicas (`asrsched.sim.fleet`: each replica is the simulator of notebook 02, behind a
# router); the estimators are those of the queueing A/B study (notebook 05, `asrsched.abtest.estimators`): naive,
# group, switchback, qDQ, wDQ and mixed DQ. Every estimate is compared with the **ground truth**: separate full runs
# with each arm's policy everywhere, on the same traces.
#
# **Two tests.**
# * *Routing* (control router → treatment router, every replica FCFS). Designs: **bernoulli** — each request is
#   treated with probability p and routed by its arm's router over the whole fleet (both arms share the replicas);
#   **group** — a random half of the replicas serves the treated requests, the other half the control requests;
#   **switchback** — the whole fleet alternates between the routers in blocks of `BLOCK_S` seconds, the first
#   `BURN_IN_S` seconds of each block are dropped; **replica_block** (replica × block, as marketplace switchbacks
#   randomise space × time) — the group design with a fresh random half of the replicas in every block, analysed
#   like the switchback (each arm's requests in a block, less the burn-in).
# * *Scheduling* (FCFS → HRRN on every replica, fixed router). Request-level randomisation is **ill-defined** here:
#   a replica orders *one* waiting queue, and whether a "treated" request goes before a "control" one is neither
#   policy's decision. The two designs that remain: **replica** — a random subset of `round(p·N)` replicas runs
#   HRRN (a request's arm is its replica's arm); **switchback** — the whole fleet switches policy every block (the
#   waiting queues are re-ordered at the boundary); **replica_block** — a fresh random half of the replicas runs
#   HRRN in every block (a replica whose arm changes re-orders its queue; a request's arm is its replica's in the
#   block it arrived in).
#
# The trade-off between replica and switchback (replica_block sits between them): replica-level randomisation never mixes policies in one queue and has no
# carry-over in time, but it has only N units (few replicas → few independent draws, and a load-aware router lets
# the arms interfere by sending more requests to the replicas that drain faster); switchback runs the whole fleet
# under one policy at a time (no interference between arms at one instant) but requests that arrive near a block's
# end are served under the next block's policy (carry-over), and the number of blocks is small.
#
# **Metrics:** E2EL and TTFT, each as the mean and the P90. Little's law (number in system = arrival rate × mean
# latency) is what lets qDQ and mixed DQ use queue lengths; it holds for means only, and the P90 rows show what that
# does to mixed DQ.
#
# **References** (the full list with titles: the README's References): Jia, Johari, Si & Zheng 2026
# (arXiv:2605.29641, mixed DQ); Farias, Li, Peng & Zheng 2022 (arXiv:2206.02371, DQ); Makwana et al. 2026
# (arXiv:2603.11273, the policies tested); Bojinov, Simchi-Levi & Zhao 2023 (switchbacks, arXiv:2009.00148).

# %% [markdown]
# **Parameters** (override with papermill or `asrsched run 06 -p NAME VALUE`):
#
# | name | meaning |
# |---|---|
# | `WORKLOADS` | duration mixes: `librispeech` (real test-clean durations), `uniform` (5–30 s), `drift` (LibriSpeech → uniform during the run) |
# | `N_REPLICAS` | fleet size N |
# | `RHO` | offered load, as a fraction of the fleet's capacity on the workload (drift: of its heavier phase) |
# | `N_REQUESTS` | requests per run (every experiment and every ground-truth run) |
# | `WARMUP_S` | seconds of traffic simulated but left out of every metric |
# | `P` | treatment probability (per request, per replica split, per switchback block mix) |
# | `ROUTING` | `[control, treatment]` routers: `random`, `round_robin`, `jsq`, `least_work`, `pod<d>`, `pod<d>_work` |
# | `ROUTING_POLICY` | scheduling policy of every replica during the routing test |
# | `SCHEDULING` | `[control, treatment]` scheduling policies (registry of `asrsched.core.policies`) |
# | `SCHEDULING_ROUTER` | router during the scheduling test |
# | `BLOCK_S`, `BURN_IN_S` | switchback block length and the burn-in dropped at the start of each block (s) |
# | `SB_BURN_INS` | burn-ins compared on the same switchback runs |
# | `L` | DQ horizon in requests; `None` = 30 × the total arrival rate (30 s of arrivals) |
# | `L_FACTORS` | horizons of the L ablation, as multiples of L |
# | `REPS`, `TRUTH_SEEDS` | experiments per design (bias, sd and RMSE and their 95 % CIs are over these); traces of the ground truth |
# | `LARGE` | `True` runs the larger study (`asrsched.abtest.asr_fleet.LARGE_STUDY`: more experiments, truth traces and requests per run; printed when used) |
# | `SEED` | master seed (every run's seed derives from it) |
# | `PLAN_FROM` | the planner's precision study: a folder written by `asrsched plan-ab --out` (default: the committed study of the ASR fleet defaults), or `None` to simulate this notebook's fleet at `PLAN_LENGTHS_S` |
# | `PLAN_LENGTHS_S`, `PLAN_REPS` | experiment lengths (s of traffic, warm-up included) and experiments per design and length when `PLAN_FROM` is `None` |
# | `PLAN_EFFECT`, `PLAN_POWER`, `PLAN_LEVEL`, `PLAN_MAX_BIAS` | the change in mean E2EL to detect (0.10 = 10 %), its power and level, and the largest relative bias a recommended estimator may have |
# | `MIXED_MAP_DIR` | the committed mixed-DQ map of this fleet (`python -m asrsched.abtest.asr_mixed_map`; its command and provenance in `run.json`) |
# | `WORKERS`, `DASK_ADDRESS`, `CACHE_DIR` | parallelism (joblib workers or a Dask scheduler, `"local"` for a local cluster) and a resumable cache folder (`None`: no cache) |

# %% tags=["parameters"]
WORKLOADS = ["librispeech", "uniform", "drift"]
N_REPLICAS = 4
RHO = 0.95
N_REQUESTS = 20000
WARMUP_S = 30.0
P = 0.5
ROUTING = ["random", "least_work"]
ROUTING_POLICY = "fcfs"
SCHEDULING = ["fcfs", "hrrn"]
SCHEDULING_ROUTER = "random"
BLOCK_S = 30.0
BURN_IN_S = 5.0
SB_BURN_INS = [0.0, 5.0, 10.0, 15.0]
L = None
L_FACTORS = [0.1, 0.3, 1.0, 3.0]
REPS = 100
TRUTH_SEEDS = 20
LARGE = False
SEED = 0
PLAN_FROM = "figures/06_ab_asr_policies/plan"
PLAN_LENGTHS_S = [300.0, 600.0, 1200.0, 2400.0, 4800.0]
PLAN_REPS = 100
PLAN_EFFECT = 0.10
PLAN_POWER = 0.8
PLAN_LEVEL = 0.05
PLAN_MAX_BIAS = 0.25
MIXED_MAP_DIR = "figures/06_ab_asr_policies/mixed_map"
WORKERS = 2
DASK_ADDRESS = None
CACHE_DIR = None

# %% tags=["checks"]
# The study's configuration, checked before any work: `asrsched run` and `asrsched dashboard` run this cell before
# they start anything, so a value out of range fails at once, naming the parameter.
from asrsched.abtest.asr_fleet import LARGE_STUDY, ASRStudyConfig
from asrsched.app.params import named_as

with named_as(
    WORKLOADS=("workload", "workloads", "unknown workload"),
    N_REPLICAS="n_replicas",
    RHO="rho",
    N_REQUESTS="n_requests",
    WARMUP_S="warmup_s",
    P="p",
    SCHEDULING=("scheduling_control", "scheduling_treatment", "control: unknown policy", "treatment: unknown policy"),
    ROUTING=("routing_control", "routing_treatment", "router", "control", "treatment"),
    ROUTING_POLICY="routing_policy",
    SCHEDULING_ROUTER="scheduling_router",
    BLOCK_S="block_s",
    BURN_IN_S="burn_in_s",
    SB_BURN_INS="sb_burn_ins",
    L="L",
    L_FACTORS="L_factors",
    REPS="reps",
    TRUTH_SEEDS="truth_seeds",
):
    cfg = ASRStudyConfig(
        workloads=tuple(WORKLOADS),
        n_replicas=N_REPLICAS,
        rho=RHO,
        n_requests=N_REQUESTS,
        warmup_s=WARMUP_S,
        p=P,
        routing_control=ROUTING[0],
        routing_treatment=ROUTING[1],
        routing_policy=ROUTING_POLICY,
        scheduling_control=SCHEDULING[0],
        scheduling_treatment=SCHEDULING[1],
        scheduling_router=SCHEDULING_ROUTER,
        block_s=BLOCK_S,
        burn_in_s=BURN_IN_S,
        sb_burn_ins=tuple(SB_BURN_INS),
        L=L,
        L_factors=tuple(L_FACTORS),
        reps=REPS,
        truth_seeds=TRUTH_SEEDS,
        seed=SEED,
    )
    if LARGE:
        cfg = cfg.replace(**LARGE_STUDY)
    cfg.validate()
from asrsched.abtest.plan_report import check_target
from asrsched.abtest.planner import PlanConfig

with named_as(
    PLAN_EFFECT="effect", PLAN_POWER="power", PLAN_LEVEL="level", PLAN_LENGTHS_S="lengths_s", PLAN_REPS="reps"
):
    check_target(PLAN_EFFECT, PLAN_POWER, PLAN_LEVEL)
    # the planner on this notebook's fleet (first workload): simulated when PLAN_FROM is None
    plan_cfg = PlanConfig(
        workload=cfg.workloads[0],
        n_replicas=cfg.n_replicas,
        rho=cfg.rho,
        routing_control=cfg.routing_control,
        routing_treatment=cfg.routing_treatment,
        scheduling_control=cfg.scheduling_control,
        scheduling_treatment=cfg.scheduling_treatment,
        scheduling_router=cfg.scheduling_router,
        lengths_s=tuple(PLAN_LENGTHS_S),
        reps=PLAN_REPS,
        truth_seeds=max(3, min(cfg.truth_seeds, 20)),
        block_s=cfg.block_s,
        burn_in_s=cfg.burn_in_s,
        extra_blocks=((2 * cfg.block_s, 3 * cfg.burn_in_s),),
        L=cfg.L,
        seed=SEED,
    ).validate()

# %%
import time

import pandas as pd
from IPython.display import Markdown, display

from asrsched.abtest import asr_fleet_report as report
from asrsched.figures import ab_asr as figs
from asrsched.figures.ab_widgets import ab_explorer
from asrsched.figures.outputs import runs_path
from asrsched.figures.style import export_figure, export_session, export_table, setup
from asrsched.sim.parallel import run_study

setup()  # house template, figures laid out as exported, explorers that survive a saved page, progress bars
NB = "06_ab_asr_policies"
if LARGE:
    print(f"LARGE study: {LARGE_STUDY}")
pd.DataFrame(
    {
        w: {
            "total rate (req/s)": cfg.total_rate(w),
            "L (requests)": cfg.L_for(cfg.total_rate(w)),
            "run length (s)": cfg.n_requests / cfg.total_rate(w),
        }
        for w in cfg.workloads
    }
).round(1)

# %%
t0 = time.perf_counter()
res = run_study(cfg, workers=WORKERS, address=DASK_ADDRESS, cache_dir=runs_path(CACHE_DIR))
summary = report.summary_table(res)
print(
    f"{len(res.estimates)} estimates from {cfg.reps} experiments x {len(cfg.designs())} designs x "
    f"{len(cfg.workloads)} workloads, plus {len(res.truth_runs)} ground-truth runs, in {time.perf_counter() - t0:.0f} s"
)

# %% [markdown]
# ## Ground truth
# Separate full runs of each setting everywhere, on the same traces (common random numbers); the effect is
# treatment minus control (negative = the treatment is faster), with its standard error over the truth traces.

# %%
truth = report.truth_table(res)
truth.pivot_table(index=["factor", "workload"], columns=["metric", "stat"], values="gte_pct").round(1)

# %% [markdown]
# ## Bias, standard deviation and MSE per design and estimator
# One row per workload × test × design × estimator × metric; `truth` is the ground-truth effect (s), `mean` the
# average estimate over the experiments, `recovered_pct` the share of the true effect it recovers on average
# (negative: the average estimate has the wrong sign), `coverage` the share of experiments whose 95 % batch-means
# interval holds the truth. Every bias, sd and RMSE comes with its 95 % CI (`*_ci_lo`, `*_ci_hi`): a t interval for
# the bias (with the truth's own standard error added), a bootstrap over the experiments for sd and RMSE. The
# second table names a lowest-MSE estimator per cell only where its RMSE CI clears every other's (`resolved`);
# otherwise it lists the estimators it is tied with.

# %%
cols = [
    "workload",
    "factor",
    "design",
    "estimator",
    "metric",
    "stat",
    "reps",
    "truth",
    "mean",
    "bias",
    "bias_ci_lo",
    "bias_ci_hi",
    "sd",
    "sd_ci_lo",
    "sd_ci_hi",
    "rmse",
    "rmse_ci_lo",
    "rmse_ci_hi",
    "recovered_pct",
    "coverage",
    "alpha",
]
with pd.option_context("display.max_rows", 200):
    display(summary[cols].round(4))

# %%
best = report.best_table(summary)
best.round(3)

# %% [markdown]
# ## Tail metrics and Little's law
# For P90 the DQ family needs a per-request cost whose mean is the P90: its influence function (see
# `asrsched.abtest.asr_fleet`). wDQ can use it; qDQ cannot — its cost is the number of requests in the fleet, and Little's law
# links that to the *mean* latency only. Mixed DQ for P90 therefore blends a P90 estimate with a mean estimate.
# `predicted_mixed_bias` is the part of its bias this explains: (1 − α) × (mean effect − P90 effect); `corr_wq` is
# the correlation of wDQ and qDQ across experiments and `sd_vs_wdq` each estimator's spread relative to wDQ.

# %%
tail = report.tail_table(summary, res)
tail.round(3)

# %% [markdown]
# ## DQ horizon and switchback burn-in

# %%
ablation = report.ablation_table(res)
burn = report.burn_in_table(res)
display(ablation[(ablation.metric == "e2el") & (ablation.stat == "mean")].round(3))
display(burn[(burn.metric == "e2el") & (burn.stat == "mean")].round(3))

# %%
figs = {
    "ground_truth_e2el": figs.fig_truth(res, "e2el", "mean"),
    "ground_truth_ttft": figs.fig_truth(res, "ttft", "mean"),
    "routing_mean_e2el": figs.fig_estimates(res, "routing", "e2el", "mean", summary=summary),
    "routing_p90_e2el": figs.fig_estimates(res, "routing", "e2el", "p90", summary=summary),
    "routing_mean_ttft": figs.fig_estimates(res, "routing", "ttft", "mean", summary=summary),
    "scheduling_mean_e2el": figs.fig_estimates(res, "scheduling", "e2el", "mean", summary=summary),
    "scheduling_mean_ttft": figs.fig_estimates(res, "scheduling", "ttft", "mean", summary=summary),
    "rmse_routing": figs.fig_rmse(summary, "routing"),
    "rmse_scheduling": figs.fig_rmse(summary, "scheduling"),
    "tail_mixed_dq": figs.fig_tail(summary),
    "dq_horizon_e2el": figs.fig_ablation(ablation, "e2el", "mean"),
}
with export_session():
    for name, fig in figs.items():
        export_figure(fig, name, NB)
export_table(summary, "estimator_summary", NB)
export_table(best, "best_estimator", NB)
export_table(truth, "ground_truth", NB)
export_table(tail, "tail_little", NB)
export_table(ablation, "dq_horizon", NB)
export_table(burn, "switchback_burn_in", NB)
export_table(res.little, "littles_law", NB)
for name in (
    "ground_truth_e2el",
    "routing_mean_e2el",
    "rmse_routing",
    "rmse_scheduling",
    "tail_mixed_dq",
    "dq_horizon_e2el",
):
    figs[name].show()

# %% [markdown]
# ## What the numbers say — recommendation for an operator
# Generated from the tables above (rerun with other parameters and it changes with them). Little's law is checked on
# every experiment (`littles_law.csv`): the largest relative gap is printed below.

# %%
print(f"Little's law, largest |lam*W/X - 1| over {len(res.little)} trajectories: {res.little.rel_gap.abs().max():.4f}")
display(Markdown(report.recommendation(res, summary)))

# %% [markdown]
# ## Plan the test before running it: how long, with which design and estimator
# The tables above judge estimators at one run length. An operator asks the converse: *how long must the test run to
# see a given change?* The planner (`asrsched.abtest.planner`, also `asrsched plan-ab`) runs every design at several
# experiment lengths and fits each estimator's **sd law** `sd ~ T^b` (−½ is the rate of independent data); its
# **bias ratio** (mean estimate / true effect) and its **CI ratio** (the reported half-width in true sds: about 2
# for an honest 95 % interval) turn that into a power curve, a required length and the minimum detectable effect
# (MDE). A length counts only where the estimator's own CI keeps the false-positive rate within twice the level;
# an estimator whose bias-ratio CI lies outside 1 ± `PLAN_MAX_BIAS` is not recommended at any length. The model's
# predicted power for the pair's own effect stands beside the share of experiments that detected it at each
# simulated length (`detected`), and a test runs fresh experiments at one planned length
# (`tests/abtest/test_planner.py`).

# %%
from asrsched.abtest import plan_report
from asrsched.abtest.asr_mixed_map import asr_map_statement
from asrsched.abtest.study_report import load_mixed_map
from asrsched.app.plan_ab import format_plan, load_plan
from asrsched.figures.ab_plan import fig_plan
from asrsched.figures.mixed_map import fig_mixed_map
from asrsched.figures.outputs import committed_path

plan_dir = committed_path(PLAN_FROM) if PLAN_FROM is not None else None
if plan_dir is not None:
    plan_res = load_plan(plan_dir)
    print(f"committed precision study {PLAN_FROM} (run.json holds its command and provenance)")
else:
    if PLAN_FROM is not None:  # an installed package ships no committed results: a small study of this fleet
        plan_cfg = plan_cfg.replace(reps=min(PLAN_REPS, 10), lengths_s=tuple(PLAN_LENGTHS_S[:3]))
        print(f"{PLAN_FROM}: not found; simulating a small precision study instead (rough numbers)")
    plan_res = run_study(plan_cfg, workers=WORKERS, address=DASK_ADDRESS, cache_dir=runs_path(CACHE_DIR))
    print(f"simulated {len(plan_res.estimates)} experiments in {plan_res.seconds:.0f} s")
prec = plan_report.precision_table(plan_res)
laws = plan_report.law_table(plan_res, prec)
plan = plan_report.plan_table(plan_res, PLAN_EFFECT, PLAN_POWER, PLAN_LEVEL, PLAN_MAX_BIAS, laws=laws)
pc = plan_res.config
print(
    f"{pc.n_replicas} replicas, rho {pc.rho:g}, {pc.workload}; {pc.reps} experiments per design at "
    f"{', '.join(f'{x:g}' for x in pc.lengths_s)} s"
)
print(format_plan(plan, laws))
display(Markdown(plan_report.plan_recommendation(plan, plan_res)))

# %%
prec = plan_report.model_check(prec, laws)
cols = ["factor", "design", "block_s", "estimator", "length_s", "sd_pct", "ci_ratio", "bias", "detected", "predicted"]
display(prec[cols].round(3))

# %% [markdown]
# **Does mixed DQ pay on this fleet?** ASR service times are nearly deterministic once the duration is known, the
# condition under which notebook 05's mixed-DQ map finds mixed DQ's gain largest. First its sd against the better
# and the worse of qDQ and wDQ over the planner's Bernoulli experiments, per experiment length (paired bootstrap
# CIs); then the committed map of this fleet (`asrsched.abtest.asr_mixed_map`: per workload, the horizon counted in
# requests or in seconds, at 0.3, 1 and 3 × L, mixed DQ's weight from batch means, from the per-request Q values
# centred per arm, or from the replications' covariance as a reference). The scheduling test has no Bernoulli
# design, so DQ does not apply to it.

# %%
mixed_gain = plan_report.mixed_gain_table(plan_res)
display(mixed_gain.round(3))
map_dir = committed_path(MIXED_MAP_DIR)
asr_map = load_mixed_map(map_dir) if map_dir is not None else None
if asr_map is None:
    print(f"{MIXED_MAP_DIR}: no committed mixed-DQ map here (python -m asrsched.abtest.asr_mixed_map writes one)")
if asr_map is not None:
    display(Markdown(asr_map_statement(asr_map)))
    display(
        asr_map[asr_map.L_factor == 1.0][
            [
                "law",
                "unit",
                "alpha",
                "gain_better",
                "gain_better_ci_lo",
                "gain_better_ci_hi",
                "gain_worse",
                "verdict",
                "reps",
            ]
        ].round(3)
    )

# %%
plan_figs = {f"ab_plan_{f}": fig_plan(prec, laws, plan, f) for f in plan.factor.unique()}
if asr_map is not None:
    n = int(asr_map.reps.min())
    plan_figs["mixed_dq_map"] = fig_mixed_map(
        asr_map,
        subtitle=f"ASR fleet, Bernoulli routing test, mean E2EL; L = 30 s of arrivals or τ = 30 s; {n} experiments per "
        "workload; bars: 95 % bootstrap CIs; band: 2–5×",
    )
with export_session():
    for name, fig in plan_figs.items():
        export_figure(fig, name, NB)
export_table(plan, "ab_plan", NB)
export_table(laws, "ab_plan_laws", NB)
export_table(prec, "ab_plan_precision", NB)
export_table(mixed_gain, "ab_plan_mixed_dq_gain", NB)
for fig in plan_figs.values():
    fig.show()

# %% [markdown]
# ## Explore
# Fleet size, load, p and the DQ horizon L: each change re-runs `run_study` (the batch path) on one workload with a
# few experiments and shows every estimate against the truth. Bigger fleets need more requests per run (the panel
# scales them), so they take longer.

# %%
ab_explorer(cfg, workload=cfg.workloads[0], reps=min(cfg.reps, 8), n_requests=min(cfg.n_requests, 8000))
