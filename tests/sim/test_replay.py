"""Replay of a deployment's traffic: a CSV or the middleware's request log in, each policy's percentiles with
block-bootstrap CIs out, and every bad input named (the rows, the column, the load) before any simulation."""

from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest

from asrsched.core.service import ServiceModel
from asrsched.core.workloads import make_trace
from asrsched.sim.engine import simulate
from asrsched.sim.replay import read_requests, replay_policies, requests_trace

SVC = ServiceModel(encode_s_per_window=0.3, decode_s_per_token=0.02, overhead_s=0.05, kappa={"en": 3.3, "id": 4.0})


@pytest.fixture
def csv(tmp_path):
    tr = make_trace("librispeech", rate=1.2, n=800, seed=3, kappa=3.3)
    df = pd.DataFrame({"arrival_s": tr.arrival + 50.0, "duration_s": tr.duration, "language": "en"})
    p = tmp_path / "traffic.csv"
    df.to_csv(p, index=False)
    return p, df


def test_replay_runs_every_policy_on_the_logged_traffic(csv):
    path, df = csv
    req = read_requests(path)
    assert req.arrival_s.iloc[0] == 0 and np.allclose(np.diff(req.arrival_s), np.diff(df.arrival_s))
    tab, info = replay_policies(req, SVC, ["fcfs", "sjf", "nudge_m4_1"], max_num_seqs=4, n_boot=300)
    assert list(tab.policy) == ["fcfs", "sjf", "nudge_m4_1"] and 0 < info["rho"] < 1
    assert info["rate_rps"] == pytest.approx(799 / (df.arrival_s.iloc[-1] - df.arrival_s.iloc[0]))
    # the FCFS row is the simulator's run of that trace, and each value lies inside its CI
    tr = requests_trace(req, SVC)
    rec = simulate(tr, "fcfs", SVC, max_num_seqs=4, warn_overload=False).records
    f = tab.iloc[0]
    assert f.p90_e2el_ms == pytest.approx(1e3 * np.percentile(rec.e2el, 90))
    for m in ("p50_e2el_ms", "p90_e2el_ms", "p99_e2el_ms", "p50_ttft_ms"):
        assert (tab[m + "_ci_low"] <= tab[m]).all() and (tab[m] <= tab[m + "_ci_high"]).all()
    assert tab.set_index("policy").loc["sjf", "p50_e2el_ms"] < f.p50_e2el_ms


def test_the_request_log_replays_as_it_is_written(tmp_path):
    from asrsched.vllm_plugin.request_log import RequestLog

    log = RequestLog(tmp_path / "requests.jsonl")
    rng = np.random.default_rng(0)
    t = 1.7e9 + np.cumsum(rng.exponential(1.0, 300))
    for a, d in zip(t, rng.uniform(2, 20, 300)):
        log.write(
            {"arrival_unix_s": a, "audio_duration_s": round(d, 3), "language": "id", "status": 200, "e2el_s": 1.0}
        )
    assert log.flush()
    req = read_requests(tmp_path / "requests.jsonl")
    assert len(req) == 300 and set(req.language) == {"id"} and req.priority.isna().all()
    # the middleware writes a line when its request ends: a log out of arrival order reads the same
    lines = (tmp_path / "requests.jsonl").read_text().splitlines()
    (tmp_path / "shuffled.jsonl").write_text("\n".join(np.random.default_rng(1).permutation(lines)) + "\n")
    assert read_requests(tmp_path / "shuffled.jsonl").equals(req)
    tab, info = replay_policies(req, SVC, ["fcfs", "hrrn"], max_num_seqs=8, n_boot=200)
    assert len(tab) == 2 and info["n_requests"] == 300


def _write(tmp_path, df, name="bad.csv"):
    p = tmp_path / name
    df.to_csv(p, index=False)
    return p


def test_bad_input_is_named_before_any_work(csv, tmp_path):
    _, df = csv
    cases = [
        (df.assign(arrival_s=df.arrival_s.where(~df.index.isin([5, 9]), 0.0)), r"not sorted: row\(s\) 7, 11 arrive"),
        (
            df.assign(arrival_s=df.arrival_s.where(df.index != 4, df.arrival_s.shift(1))),
            r"duplicate arrival times in row\(s\) 6",
        ),
        (
            df.assign(duration_s=df.duration_s.where(df.index != 3, -2.0)),
            r"duration_s must be > 0 s; row\(s\) 5 have \[-2.0\]",
        ),
        (
            df.assign(duration_s=df.duration_s.where(df.index != 8, np.nan)),
            r"duration_s missing or not a number in row\(s\) 10",
        ),
        (df.assign(speaker="x"), r"unknown column\(s\) \['speaker'\]"),
        (df.drop(columns="duration_s"), "need exactly one arrival column"),
    ]
    for bad, match in cases:
        with pytest.raises(ValueError, match=match):
            read_requests(_write(tmp_path, bad))
    with pytest.raises(ValueError, match=r"language\(s\) \['fr'\] in row\(s\) 9 have no kappa"):
        replay_policies(
            read_requests(_write(tmp_path, df.assign(language=df.language.where(df.index != 7, "fr")))), SVC
        )
    with pytest.raises(ValueError, match=r"the log's rate .* is \d\.\d\d of the capacity .* cannot serve this traffic"):
        replay_policies(read_requests(_write(tmp_path, df.assign(arrival_s=df.arrival_s / 4))), SVC, max_num_seqs=4)
    with pytest.raises(FileNotFoundError, match="LOG: .* not found"):
        read_requests(tmp_path / "missing.csv")


def test_the_command_prints_the_percentiles_and_rejects_an_unsorted_file(csv, tmp_path, capsys):
    from asrsched.app.replay_cmd import main

    path, df = csv
    assert (
        main(
            [
                str(path),
                "--service",
                "a100",
                "--policies",
                "fcfs",
                "sjf",
                "--n-boot",
                "200",
                "--out",
                str(tmp_path / "o"),
            ]
        )
        == 0
    )
    out = capsys.readouterr().out
    assert "rho" in out and out.count("[") >= 8 and out.splitlines()[2].startswith("fcfs")
    saved = json.loads((tmp_path / "o" / "replay.json").read_text())
    assert saved["provenance"]["command"].startswith("asrsched replay") and 0 < saved["rho"] < 1
    bad = _write(tmp_path, df.assign(arrival_s=df.arrival_s.where(df.index != 10, 0.0)))
    assert main([str(bad), "--service", "cpu"]) == 2
    assert "not sorted: row(s) 12 arrive before the row above" in capsys.readouterr().err
    assert main([str(path), "--policies", "fifo"]) == 2
    assert "--policies: unknown policy 'fifo'" in capsys.readouterr().err
    assert main([str(path), "--block-s", "0"]) == 2
    assert "--block-s: need a block length > 0 s" in capsys.readouterr().err
