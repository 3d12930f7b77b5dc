"""The latency frontier: every run replays one trace per seed under every policy, the table's changes are
the paired geometric means against FCFS, the Pareto set and the recommendation follow their definitions,
and bad input is named (as the user wrote it, on the command line) before any simulation."""

import numpy as np
import pandas as pd
import pytest

from asrsched.sim.frontier import BASE_POLICIES, FrontierConfig, frontier_policies, run_frontier
from asrsched.sim.frontier_report import CELL, frontier_table, recommendations

CFG = FrontierConfig(
    workloads=("uniform",),
    rhos=(0.9, 1.2),
    errors=("real", "perfect"),
    seeds=3,
    n_requests=600,
    gamma_scales=(0.1, 1.0),
    nudge_quantiles=(0.5,),
    nudge_ms=(1, 4),
    services={
        "small": ({"encode_s_per_window": 0.3, "decode_s_per_token": 0.02, "overhead_s": 0.05, "kappa": {"en": 3.3}}, 4)
    },
)


@pytest.fixture(scope="module")
def runs():
    return run_frontier(CFG, workers=1, progress=False)


def test_every_policy_runs_every_cell_on_shared_traces(runs):
    from asrsched.core.service import as_service_model

    sm = as_service_model(CFG.services["small"][0])
    pols = frontier_policies(CFG, sm, "uniform", "perfect")
    assert pols[:4] == list(BASE_POLICIES) and len(pols) == 4 + 2 + 2
    assert any(p.startswith("gamma_boost_") for p in pols) and "nudge_m4_" in " ".join(pols)
    real = frontier_policies(CFG, sm, "uniform", "real")
    assert set(pols) < set(real) and [p for p in real if p.endswith("_real")] == [p + "_real" for p in pols[4:6]]
    assert len(runs) == 2 * 3 * (len(pols) + len(real))
    assert set(runs.regime) == {"stable", "overload"} and (runs.measured_requests == 540).all()
    # one trace per (cell, seed): the served work is the same whatever the order
    g = runs.groupby([*CELL, "seed"]).rate.nunique()
    assert (g == 1).all()


def test_table_changes_pareto_and_recommendation(runs):
    tab = frontier_table(runs)
    f = tab[tab.policy == "fcfs"]
    assert np.allclose(f["p50_e2el_ms_change_pct"], 0) and f["p90_ok"].all() and f["p99_ok"].all()
    # one change by hand: the geometric mean of the seeds' paired ratios
    cell = dict(service="small", workload="uniform", rho=0.9, error="real")
    sel = (runs[list(cell)] == pd.Series(cell)).all(axis=1)
    r = runs[sel].pivot(index="seed", columns="policy", values="p50_e2el_ms")
    want = 100 * (np.exp(np.mean(np.log(r["sjf"] / r["fcfs"]))) - 1)
    row = tab[(tab[list(cell)] == pd.Series(cell)).all(axis=1) & (tab.policy == "sjf")].iloc[0]
    assert row["p50_e2el_ms_change_pct"] == pytest.approx(want)
    assert row["p50_e2el_ms_change_ci_low"] < want < row["p50_e2el_ms_change_ci_high"]
    assert want < -10  # SJF cuts the median at rho 0.9 on four slots
    for _, g in tab.groupby(CELL):
        x, y = g["p50_e2el_ms_change_pct"].to_numpy(), g["p90_e2el_ms_change_pct"].to_numpy()
        for i, par in enumerate(g["pareto"].to_numpy()):
            dominated = np.any((x <= x[i]) & (y <= y[i]) & ((x < x[i]) | (y < y[i])))
            assert par == (not dominated)
        assert g["pareto"].any()
    rec = recommendations(tab)
    assert len(rec) == 2 * 2 * 2 and set(rec.rule) == {"p90", "p99"}
    for _, r in rec.iterrows():
        g = tab[(tab[CELL] == r[CELL]).all(axis=1)]
        ok = g[g[f"{r['rule']}_ok"]]
        assert r["policy"] in set(ok.policy) and r["p50_e2el_ms_change_pct"] == ok["p50_e2el_ms_change_pct"].min()
        m = "p90_e2el_ms" if r["rule"] == "p90" else "p99_e2el_ms"
        assert r[f"{m}_change_pct"] <= 1e-12


@pytest.mark.parametrize(
    "kw, match",
    [
        ({"workloads": ("podcasts",)}, r"workloads: unknown \['podcasts'\]"),
        ({"rhos": (0.9, -1.0)}, "rhos must be positive"),
        ({"errors": ("wild",)}, "unknown preset 'wild'"),
        ({"seeds": 1}, "seeds: need at least 2"),
        ({"nudge_ms": (0,)}, "nudge_ms: need integers >= 1"),
        ({"gamma_scales": (0.0,)}, "gamma_scales: need numbers > 0"),
    ],
)
def test_bad_config_is_named(kw, match):
    with pytest.raises(ValueError, match=match):
        FrontierConfig(**kw)


def test_the_command_names_the_flag_before_any_work(capsys):
    from asrsched.app.frontier_cmd import main

    assert main(["--rhos", "0.9", "0", "--seeds", "2"]) == 2
    assert "--rhos must be positive" in capsys.readouterr().err
    assert main(["--services", "tpu"]) == 2
    assert "--services: unknown service model 'tpu'" in capsys.readouterr().err
    assert main(["--from", "/nonexistent/frontier"]) == 2
    assert "--from: /nonexistent/frontier/runs.csv.gz not found" in capsys.readouterr().err


def test_the_command_writes_and_rereads_a_study(tmp_path, capsys):
    from asrsched.app.frontier_cmd import load_frontier, main

    argv = ["--workloads", "uniform", "--rhos", "0.9", "--errors", "real", "--seeds", "2", "--n-requests", "300"]
    argv += ["--gamma-scales", "0.3", "--nudge-quantiles", "0.5", "--nudge-ms", "2", "--services", "a100", "--quiet"]
    assert main([*argv, "--workers", "1", "--out", str(tmp_path)]) == 0
    first = capsys.readouterr().out
    runs, run = load_frontier(tmp_path)
    assert len(runs) == 2 * 7 and run["config"]["seeds"] == 2 and "commit" in run["provenance"]
    assert run["provenance"]["command"].startswith("asrsched frontier --workloads uniform --rhos 0.9")
    assert main(["--from", str(tmp_path)]) == 0
    again = capsys.readouterr().out
    assert again.strip() == first.split("\n\n")[0].strip()
    assert any(line.split()[:5] == ["a100", "uniform", "0.90", "real", "p90"] for line in again.splitlines())
