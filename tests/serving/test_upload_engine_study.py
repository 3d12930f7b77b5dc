"""The real-engine long-upload study's parts that need no engine: uploads made of real speech, the capacity of the
mixed traffic from the short requests', the paired changes and the configuration's errors. (The study itself runs
on vLLM-CPU: its committed results are ``figures/02_policy_sweep/uploads_real``.)"""

import numpy as np
import pandas as pd
import pytest
from extras import need

need("soundfile")

import soundfile as sf  # noqa: E402

from asrsched.core.service import default_service_model  # noqa: E402
from asrsched.core.workloads import make_trace  # noqa: E402
from asrsched.serving.upload_engine_study import UploadEngineConfig, mix_capacity, short_changes, upload_audio  # noqa: E402
from asrsched.sim.upload_study import upload_source  # noqa: E402
from asrsched.whisper.corpus import synthesize  # noqa: E402


def test_an_upload_is_real_speech_laid_end_to_end(tmp_path):
    clips = []
    for i, text in enumerate(
        ["The birch canoe slid on the smooth planks.", "Glue the sheet to the dark blue background."]
    ):
        p = tmp_path / f"c{i}.wav"
        sf.write(p, (synthesize(text, "en") * 32767).astype(np.int16), 16000, subtype="PCM_16")
        clips.append(str(p))
    d = upload_audio(clips, 75.0, tmp_path / "up.wav", seed=1)
    y, sr = sf.read(tmp_path / "up.wav")
    assert sr == 16000 and d == pytest.approx(75.0, abs=1e-3) and len(y) == 75 * 16000
    # speech throughout, not padding: every 10 s window carries energy
    rms = [np.sqrt(np.mean(y[k : k + 160000] ** 2)) for k in range(0, len(y) - 160000, 160000)]
    assert min(rms) > 0.01


def test_mixed_capacity_is_below_the_short_requests():
    sm = default_service_model()
    tr = make_trace(upload_source(0.05, 60, 600), rate=1e6, n=2000, seed=3, kappa=dict(sm.kappa))
    cap, ratio = mix_capacity(10.0, tr, sm, 32)
    assert 0.3 < ratio < 0.95 and cap == pytest.approx(10.0 * ratio)


def test_paired_changes_against_the_baseline():
    rng = np.random.default_rng(0)
    base = rng.lognormal(0, 0.5, 300)
    t = short_changes({"fcfs/chunk": base, "sjf/chunk": base * 0.7, "same": base.copy()}, "fcfs/chunk", 500)
    row = t.set_index("cell")
    assert row.loc["sjf/chunk", "short_p50_change_pct"] == pytest.approx(-30.0)
    # paired: a uniform 30 % cut has a (nearly) zero-width interval; the baseline against itself is 0
    assert row.loc["sjf/chunk", "short_p50_change_ci_high"] - row.loc["sjf/chunk", "short_p50_change_ci_low"] < 1e-6
    assert row.loc["same", "short_p90_change_pct"] == 0.0
    lo, hi = row.loc["fcfs/chunk", ["short_p50_e2el_s_ci_low", "short_p50_e2el_s_ci_high"]]
    assert lo < np.median(base) < hi
    with pytest.raises(ValueError, match=r"e2el\['x'\]: 10 requests, the baseline has 300"):
        short_changes({"fcfs/chunk": base, "x": base[:10]}, "fcfs/chunk", 100)


def test_config_errors_name_the_parameter():
    with pytest.raises(ValueError, match="rho: the study runs a stable load"):
        UploadEngineConfig(rho=1.2)
    with pytest.raises(ValueError, match="n_short: at least 150"):
        UploadEngineConfig(n_short=40)
    with pytest.raises(ValueError, match="policies, sizings: FCFS and chunk sizing come first"):
        UploadEngineConfig(sizings=("upload", "chunk"))
    with pytest.raises(ValueError, match="sizings: unknown sizing 'all'"):
        UploadEngineConfig(sizings=("chunk", "all"))
    with pytest.raises(ValueError, match="policies: unknown policy 'shortest'"):
        UploadEngineConfig(policies=("fcfs", "shortest"))
    assert UploadEngineConfig(policies=("fcfs", "hrrn", "nudge_m4")).policies[-1] == "nudge_m4"  # set at calibration


def test_the_command_line_names_a_bad_flag_and_runs_nothing(tmp_path, capsys):
    from asrsched.serving.upload_engine_study import main

    assert main(["--rho", "0.9", "--policies", "fcfs", "nudge", "--no-stream", "--out", str(tmp_path / "o")]) == 2
    assert "policies: unknown policy 'nudge'" in capsys.readouterr().err
    assert not (tmp_path / "o").exists()


@pytest.mark.parametrize(("folder", "mode"), [("uploads_real", "streamed"), ("uploads_real_nonstream", "chunks")])
def test_each_committed_run_is_predicted_by_the_mode_that_matches_how_it_sent_uploads(folder, mode):
    """A committed vLLM-CPU run re-simulated from its folder (the same trace, the audio it sent, the model fitted to
    its engine's steps): the mode that matches its requests (streamed: each chunk submitted when the one before
    finishes; non-streamed: chunks submitted together) predicts its short requests' P50 and P90 E2EL within 50 % in
    every cell, and closer than the other mode in the worst cell."""
    import json
    from pathlib import Path

    from asrsched.serving.upload_engine_study import prediction_errors

    d = Path(__file__).resolve().parents[2] / "figures" / "02_policy_sweep" / folder
    streamed = json.loads((d / "run.json").read_text())["config"].get("stream", True)
    assert streamed == (mode == "streamed")
    res = pd.read_csv(d / "results.csv")
    pred = prediction_errors(d)
    err = {}
    for m, sim in pred.groupby("sim_mode"):
        assert list(sim.cell) == list(res.cell)
        np.testing.assert_allclose(sim.short_p90_e2el_s, res.short_p90_e2el_s)  # beside the run's own numbers
        err[m] = {q: sim[f"short_{q}_e2el_s_error_pct"].abs().max() / 100 for q in ("p50", "p90")}
    assert set(err) == {"chunks", "streamed"}
    other = "chunks" if mode == "streamed" else "streamed"
    for q in ("p50", "p90"):
        assert err[mode][q] < 0.5 and err[mode][q] < err[other][q], err


def test_block_bootstrap_widens_the_ci_of_requests_that_queue_together():
    from asrsched.serving.upload_engine_study import decorrelation_lag

    rng = np.random.default_rng(1)
    x = np.empty(400)
    x[0] = 0.0
    for i in range(1, 400):  # AR(1), phi 0.9: the autocorrelation at lag k is 0.9**k, below 0.1 from lag 22
        x[i] = 0.9 * x[i - 1] + rng.normal()
    lag = decorrelation_lag(x)
    assert 12 <= lag <= 35
    assert decorrelation_lag(rng.normal(size=400)) <= 2
    base = np.exp(x / 4)
    other = base * 1.1
    width = {}
    for b in (1, lag):
        t = short_changes({"fcfs/chunk": base, "x": other}, "fcfs/chunk", 1000, block=b).set_index("cell")
        assert t.loc["x", "short_p50_change_pct"] == pytest.approx(10.0)
        assert t.loc["x", "short_p50_change_ci_low"] == pytest.approx(10.0)  # a constant ratio: every draw gives it
        width[b] = t.loc["fcfs/chunk", "short_p50_e2el_s_ci_high"] - t.loc["fcfs/chunk", "short_p50_e2el_s_ci_low"]
    assert width[lag] > 1.3 * width[1]
    with pytest.raises(ValueError, match="block: need an integer from 1 to the 400 requests, got 0"):
        short_changes({"fcfs/chunk": base}, "fcfs/chunk", 10, block=0)
    with pytest.raises(ValueError, match="x: need a series of at least 3 finite values"):
        decorrelation_lag([1.0, np.nan, 2.0])


def test_engine_changes_compare_within_a_server_and_check_fcfs_between_servers():
    from pathlib import Path

    from asrsched.serving.upload_engine_study import decorrelation_lag, engine_changes

    d = Path(__file__).resolve().parents[2] / "figures" / "02_policy_sweep" / "uploads_real_nonstream"
    t = engine_changes(d, n_boot=300)
    res = pd.read_csv(d / "results.csv")
    within = t[t.comparison == "within a server"]
    assert set(within.cell) == set(res.cell)  # every cell once, against FCFS of its own server
    assert (within.baseline.str.split("/").str[1] == within.cell.str.split("/").str[1]).all()
    base = within[within.cell == within.baseline]
    assert (base.short_p50_change_pct == 0).all() and (base.short_p90_change_ci_high == 0).all()
    # the same requests' percentiles as the run's own table
    np.testing.assert_allclose(
        within.set_index("cell").loc[res.cell, "short_p90_e2el_s"].to_numpy(), res.short_p90_e2el_s.to_numpy()
    )
    aa = t[t.comparison == "between servers (A/A)"]
    assert list(aa.cell) == ["fcfs/upload"] and list(aa.baseline) == ["fcfs/chunk"]
    rec = pd.read_parquet(d / "records.parquet")
    up = pd.read_csv(d / "uploads.csv").upload.to_numpy()
    fc = rec[(rec.policy == "fcfs") & (rec.sizing == "chunk")].sort_values("rid").e2el.to_numpy()
    assert (t.block == decorrelation_lag(np.delete(fc, up))).all()
