"""The engine-step fit (asrsched.serving.vllm_steps) on synthetic step logs with known costs.

The real engine's log is fitted in tests/serving/test_serving_study.py::test_quick_study_on_vllm_fits_its_steps_compares_load_tools_and_merges_with_other_engines.
"""

from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest
from extras import need

from asrsched.serving.vllm_steps import fit_step_model, read_step_log, select_steps, step_time_table


def _steps(n=400, base=0.02, per_seq=0.005, encoder=0.3, noise=0.0, seed=0, max_b=4):
    rng = np.random.default_rng(seed)
    seqs = rng.integers(1, max_b + 1, n)
    enc = (rng.random(n) < 0.1) * rng.integers(1, 3, n)
    y = base + per_seq * seqs + encoder * enc
    y = y * (1 + noise * rng.standard_normal(n))
    return pd.DataFrame(
        {
            "t": np.arange(n, dtype=float),
            "n_seqs": seqs,
            "n_new": enc,
            "n_encoder": enc,
            "n_tokens": seqs + 4 * enc,
            "step_s": y,
        }
    )


def _write(path, df, extra_lines=()):
    with open(path, "w") as fh:
        for r in df.to_dict("records"):
            fh.write(json.dumps({**r, "t0": 0.0}) + "\n")
        for line in extra_lines:
            fh.write(line + "\n")


def test_fit_recovers_the_step_costs_and_maps_them_onto_the_service_model(tmp_path):
    _write(
        tmp_path / "s.jsonl",
        _steps(noise=0.02),
        extra_lines=[
            '{"t": 1, "n_seqs": 0, "n_new": 0, "n_encoder": 0, "n_tokens": 0, "step_s": 0.001}',
            '{"t": 2, "n_se',
        ],
    )  # idle step, cut line
    steps = read_step_log(tmp_path / "s.jsonl")
    assert len(steps) == 400 and (steps.n_seqs > 0).all()
    m = fit_step_model(steps, kappa={"en": 4.0}, overhead_s=0.05)
    assert m.fit["base_s"] == pytest.approx(0.02, rel=0.1) and m.fit["per_seq_s"] == pytest.approx(0.005, rel=0.1)
    assert m.encode_s_per_window == pytest.approx(0.3, rel=0.03)
    # step(1) = base + per_seq; step(b) grows by per_seq per sequence
    assert m.step_s(1) == pytest.approx(0.025, rel=0.05)
    assert m.step_s(4) - m.step_s(1) == pytest.approx(3 * 0.005, rel=0.1)
    assert m.overhead_s == 0.05 and m.kappa == {"en": 4.0} and m.fit["n_steps"] == 400
    t = step_time_table(steps)
    dec = t[t.encoder == 0].set_index("n_seqs")["median_step_s"]
    assert list(dec.index) == [1, 2, 3, 4] and (np.diff(dec.to_numpy()) > 0).all()


def test_steps_slowed_by_another_process_barely_move_the_fit(tmp_path):
    """A fifth of the steps five times slower (another process took the cores): the fit through the cells'
    medians stays within 10 % of the costs, where least squares over the steps is pulled far off."""
    s = _steps(noise=0.02, seed=4)
    rng = np.random.default_rng(5)
    slow = rng.random(len(s)) < 0.2
    s.loc[slow, "step_s"] *= 5.0
    m = fit_step_model(s, kappa={"en": 4.0})
    assert m.step_s(1) == pytest.approx(0.025, rel=0.1) and m.encode_s_per_window == pytest.approx(0.3, rel=0.1)
    assert m.fit["median_abs_rel_err"] < 0.1
    from scipy import sparse
    from scipy.optimize import linprog, nnls

    A = np.column_stack([np.ones(len(s)), s.n_seqs, s.n_encoder]).astype(float)
    y = s.step_s.to_numpy()
    base, per_seq, _ = nnls(A, y)[0]
    assert base + per_seq > 1.3 * 0.025  # what least squares over the steps would have said
    # the fit is the least-absolute-deviations optimum: the linear program's, solved here by HiGHS
    n, eye = len(y), sparse.identity(len(y), format="csc")
    lp = linprog(
        np.concatenate([np.zeros(3), np.ones(2 * n)]),
        A_eq=sparse.hstack([sparse.csc_matrix(A), eye, -eye]),
        b_eq=y,
        bounds=(0, None),
        method="highs",
    )
    fitted = np.array([m.fit["base_s"], m.fit["per_seq_s"], m.fit["encoder_s"]])
    assert np.abs(y - A @ fitted).sum() == pytest.approx(lp.fun, rel=1e-6)


def test_select_steps_copies_the_steps_that_started_in_the_windows(tmp_path):
    _write(tmp_path / "all.jsonl", _steps(n=100), extra_lines=['{"t": 50.5, "n_se'])  # a line cut short
    n = select_steps(tmp_path / "all.jsonl", tmp_path / "part.jsonl", [(10, 19.5), (80, 1e9)])
    part = read_step_log(tmp_path / "part.jsonl")
    assert n == len(part) == 10 + 20 and part["t"].tolist() == [*range(10, 20), *range(80, 100)]
    assert select_steps(tmp_path / "all.jsonl", tmp_path / "none.jsonl", []) == 0


def test_fit_refuses_logs_that_cannot_identify_the_costs(tmp_path):
    s = _steps()
    with pytest.raises(ValueError, match="at least 20 engine steps"):
        fit_step_model(s.head(5), kappa={"en": 4.0})
    with pytest.raises(ValueError, match="encoder"):
        fit_step_model(s[s.n_encoder == 0], kappa={"en": 4.0})
    one = s[(s.n_encoder > 0) | (s.n_seqs == 1)]
    with pytest.raises(ValueError, match="batch size"):
        fit_step_model(one, kappa={"en": 4.0})
    with pytest.raises(ValueError, match="no step records"):
        (tmp_path / "e.jsonl").write_text("\n")
        read_step_log(tmp_path / "e.jsonl")
    with pytest.raises(ValueError, match="missing.jsonl"):
        read_step_log(tmp_path / "missing.jsonl")


def test_plugin_config_reads_the_step_log_path_from_env_and_additional_config():
    from asrsched.vllm_plugin.scheduler import PluginConfig

    assert PluginConfig.from_sources({}, env={"ASRSCHED_STEP_LOG": "/tmp/x.jsonl"}).step_log == "/tmp/x.jsonl"
    assert PluginConfig.from_sources({"step_log": "/tmp/y.jsonl"}, env={}).step_log == "/tmp/y.jsonl"
    assert PluginConfig.from_sources({}, env={}).step_log is None


def test_step_record_counts_what_a_scheduler_output_runs():
    from types import SimpleNamespace

    from asrsched.vllm_plugin.scheduler import step_record

    out = SimpleNamespace(
        num_scheduled_tokens={"a": 1, "b": 1, "c": 5},
        scheduled_encoder_inputs={"c": [0]},
        scheduled_new_reqs=[object()],
        total_num_scheduled_tokens=7,
    )
    r = step_record(out, 12.5)
    assert r["n_seqs"] == 3 and r["n_encoder"] == 1 and r["n_new"] == 1 and r["n_tokens"] == 7 and r["t0"] == 12.5


def test_step_time_figure_shows_measured_medians_and_the_fit():
    need("plotly")
    from asrsched.figures.serving import fig_step_times

    steps = _steps(noise=0.02)
    m = fit_step_model(steps, kappa={"en": 4.0})
    fig = fig_step_times(steps, m)
    med = [t for t in fig.data if t.name == "decode only (median)"][0]
    fit = [t for t in fig.data if t.name == "decode only (fit)"][0]
    assert list(med.x) == [1, 2, 3, 4] and np.allclose(med.y, fit.y, rtol=0.05)
    assert "per encoder run" in fig.layout.title.text and "n=400 steps" in fig.layout.title.text
    same = fig_step_times(step_time_table(steps), m)  # from the committed table: the same figure
    assert [list(t.y) for t in same.data] == [list(t.y) for t in fig.data]


def test_sim_error_summary_takes_medians_of_absolute_errors_per_engine_and_regime():
    from asrsched.serving.study_stats import sim_error_summary

    res = pd.DataFrame(
        {
            "engine": ["a", "a", "a", "b"],
            "regime": ["stable", "stable", "overload", "stable"],
            "sim_p50_e2el_err_pct": [-10.0, 20.0, 40.0, 5.0],
            "sim_p90_e2el_err_pct": [1.0, 2, 3, np.nan],
        }
    )
    s = sim_error_summary(res, metrics=("p50_e2el", "p90_e2el")).set_index(["group", "regime", "metric"])
    assert s.loc[("all", "all", "p50_e2el"), "median_abs_err_pct"] == 15.0  # |-10|, 20, 40, 5
    assert s.loc[("a", "stable", "p50_e2el"), "median_abs_err_pct"] == 15.0
    assert s.loc[("a", "overload", "p50_e2el"), "max_abs_err_pct"] == 40.0
    assert s.loc[("b", "all", "p90_e2el"), "cells"] == 0 and np.isnan(
        s.loc[("b", "all", "p90_e2el"), "median_abs_err_pct"]
    )


def test_load_tool_comparison_reports_ratios_with_bootstrap_cis(tmp_path):
    from asrsched.serving.loadtools import bench_serve_dataset, compare_load_tools

    rng = np.random.default_rng(1)
    e = rng.gamma(4.0, 0.5, 400)
    ours = pd.DataFrame({"status": [200] * 400 + [0], "ttft": np.r_[e * 0.2, np.nan], "e2el": np.r_[e, np.nan]})
    perm = rng.permutation(400)  # the same latencies in another order: ratio 1, inside its CI
    same = pd.DataFrame({"ok": True, "ttft": e[perm] * 0.2, "e2el": e[perm]})
    t = compare_load_tools(ours, same, n_boot=500).set_index("metric")
    assert t["agree"].all() and (t["n_loadgen"] == 400).all()  # the failed request is left out
    assert np.allclose(t.ratio, 1.0) and (t.ratio_ci_low < 1).all() and (t.ratio_ci_high > 1).all()
    slower = same.assign(e2el=same.e2el * 1.5)
    t2 = compare_load_tools(ours, slower, n_boot=500).set_index("metric")
    assert not t2.loc["p50_e2el_s", "agree"] and t2.loc["p50_e2el_s", "ratio_ci_low"] > 1.2
    clip = tmp_path / "a.wav"
    clip.write_bytes(b"RIFF")
    lines = bench_serve_dataset(pd.DataFrame({"path": [str(clip), str(clip)]}), tmp_path / "d.jsonl").read_text()
    assert [json.loads(x) for x in lines.splitlines()] == [{"prompt": "", "audio": str(clip), "output_tokens": 224}] * 2
    with pytest.raises(FileNotFoundError, match="missing.wav"):
        bench_serve_dataset(pd.DataFrame({"path": [str(tmp_path / "missing.wav")]}), tmp_path / "e.jsonl")


def test_study_figure_has_a_panel_per_engine_with_cis_and_open_overload_markers():
    need("plotly")
    from asrsched.figures.serving import fig_study

    rows = []
    for eng in ("cpu-server", "vllm"):
        for pol, f in (("fcfs", 1.0), ("sjf", 0.7)):
            for rho in (0.7, 1.2):
                y = f * rho
                rows.append(
                    dict(
                        engine=eng,
                        policy=pol,
                        rho=rho,
                        n_requests=150,
                        p50_e2el_s=y,
                        p50_ci_low=0.9 * y,
                        p50_ci_high=1.2 * y,
                        sim_p50_e2el_s=1.1 * y,
                    )
                )
    fig = fig_study(pd.DataFrame(rows))
    real = [t for t in fig.data if t.name == "sjf"]
    assert len(real) == 2 and {t.xaxis for t in real} == {"x", "x2"}  # one trace per engine panel
    assert list(real[0].marker.color)[1] == "white" and np.allclose(real[0].error_y.array, [0.2 * 0.49, 0.2 * 0.84])
    assert "n=150 per point" in fig.layout.title.text


def test_arrival_adjusted_ratio_divides_out_the_simulated_difference_of_the_two_arrival_draws():
    from asrsched.core.service import ServiceModel
    from asrsched.serving.loadtools import compare_load_tools, simulate_tool_runs

    m = ServiceModel(encode_s_per_window=0.5, decode_s_per_token=0.01, overhead_s=0.0, kappa={"en": 4.0})
    rng = np.random.default_rng(3)
    n = 200
    dur = rng.uniform(2, 20, n)
    sends = np.cumsum(rng.exponential(1 / 1.2, n))
    ours = pd.DataFrame(
        {
            "rid": np.arange(n),
            "sent": sends,
            "arrival": sends,
            "duration": dur,
            "language": "en",
            "status": 200,
            "ttft": 1.0,
            "e2el": 2.0,
        }
    )
    same = pd.DataFrame({"start": sends, "ok": True, "ttft": 1.0, "e2el": 2.0})
    s1, s2 = simulate_tool_runs(ours, same, m)
    assert np.allclose(s1.e2el.to_numpy(), s2.e2el.to_numpy())  # same sends: the same simulated run
    burst = same.assign(start=sends * 0.8)  # the bench drew denser arrivals: higher load, longer waits
    s1, s2 = simulate_tool_runs(ours, burst, m)
    assert s2.e2el.median() > s1.e2el.median()
    t = compare_load_tools(
        ours, burst.assign(e2el=2.0 * s2.e2el.median() / s1.e2el.median()), n_boot=200, sim_loadgen=s1, sim_bench=s2
    ).set_index("metric")
    assert t.loc["p50_e2el_s", "adjusted_ratio"] == pytest.approx(1.0) and t.loc["p50_e2el_s", "adjusted_agree"]
    with pytest.raises(ValueError, match="not the same clips"):
        simulate_tool_runs(ours, same.head(5), m)
