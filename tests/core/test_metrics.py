"""Metrics named as in ``vllm bench serve``: percentiles, throughput, RTFx, change vs FCFS, starvation."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from asrsched.core.metrics import latency_cdf, percentile_table, relative_change, summarize


def _records(rng: np.random.Generator, n: int = 1000) -> pd.DataFrame:
    arrival = np.cumsum(rng.exponential(0.5, n))
    qd = rng.exponential(1.0, n)
    enc = rng.uniform(0.02, 0.1, n)
    dur = rng.uniform(1, 35, n)
    admit = arrival + qd
    first = admit + enc
    finish = first + 0.02 * dur * rng.uniform(2, 4, n)
    return pd.DataFrame(
        {
            "rid": np.arange(n),
            "arrival": arrival,
            "duration": dur,
            "admit": admit,
            "first_token": first,
            "finish": finish,
        }
    )


def test_summarize_against_an_independent_computation():
    rng = np.random.default_rng(0)
    df = _records(rng)
    s = summarize(df)
    e2el = df["finish"] - df["arrival"]
    ttft = df["first_token"] - df["arrival"]
    qd = df["admit"] - df["arrival"]
    span = df["finish"].max() - df["arrival"].min()
    assert s["completed"] == 1000 and s["failed"] == 0
    assert s["request_throughput"] == pytest.approx(1000 / span)
    assert s["rtfx"] == pytest.approx(df["duration"].sum() / span)
    for name, v in (("e2el", e2el), ("ttft", ttft), ("queue_delay", qd)):
        assert s[f"mean_{name}_ms"] == pytest.approx(1e3 * v.mean())
        assert s[f"median_{name}_ms"] == pytest.approx(1e3 * v.median())
        for p in (50, 90, 99):
            assert s[f"p{p}_{name}_ms"] == pytest.approx(1e3 * v.quantile(p / 100))
    assert s["p50_e2el_ms"] < s["p90_e2el_ms"] < s["p99_e2el_ms"]
    assert s["max_queue_delay_ms"] == pytest.approx(1e3 * qd.max())
    long = df["duration"] >= df["duration"].quantile(0.9)
    assert s["long10_slowdown"] == pytest.approx((e2el[long] / df["duration"][long]).mean())


def test_failed_requests_are_counted_not_averaged():
    df = _records(np.random.default_rng(1), 200)
    ok = summarize(df)
    broken = df.copy()
    broken.loc[[3, 50], "finish"] = np.nan
    s = summarize(broken)
    assert s["completed"] == 198 and s["failed"] == 2
    kept = df.drop(index=[3, 50])
    assert s["mean_e2el_ms"] == pytest.approx(1e3 * (kept["finish"] - kept["arrival"]).mean())
    assert s["mean_e2el_ms"] != ok["mean_e2el_ms"]


def test_relative_change_against_fcfs_averages_seeds_first():
    rows = []
    for wl in ("librispeech", "uniform"):
        for rate in (5, 20):
            for seed, noise in ((0, 0.9), (1, 1.1)):
                base = 1000.0 * rate * (2 if wl == "uniform" else 1)
                rows.append(
                    dict(
                        workload=wl, rate=rate, seed=seed, policy="fcfs", p50_e2el_ms=base * noise, p90_e2el_ms=3 * base
                    )
                )
                rows.append(
                    dict(
                        workload=wl,
                        rate=rate,
                        seed=seed,
                        policy="sjf",
                        p50_e2el_ms=0.27 * base * noise,
                        p90_e2el_ms=1.97 * 3 * base,
                    )
                )
    out = relative_change(pd.DataFrame(rows), metrics=("p50_e2el_ms", "p90_e2el_ms"))
    assert len(out) == 8  # (2 workloads x 2 rates) x 2 policies
    sjf = out[out["policy"] == "sjf"]
    np.testing.assert_allclose(sjf["p50_e2el_ms_change_pct"], -73.0)
    np.testing.assert_allclose(sjf["p90_e2el_ms_change_pct"], 97.0)
    np.testing.assert_allclose(out[out["policy"] == "fcfs"]["p50_e2el_ms_change_pct"], 0.0)
    with pytest.raises(ValueError, match="baseline policy 'hrrn' is not in the table"):
        relative_change(pd.DataFrame(rows), baseline="hrrn")


def test_percentile_table_and_cdf():
    rng = np.random.default_rng(2)
    recs = {"fcfs": _records(rng), "sjf": _records(rng)}
    tab = percentile_table(recs)
    assert list(tab["policy"]) == ["fcfs", "sjf"]
    e = recs["sjf"]["finish"] - recs["sjf"]["arrival"]
    assert tab.loc[1, "p90_e2el_ms"] == pytest.approx(1e3 * np.percentile(e, 90))
    x, y = latency_cdf(e.to_numpy(), points=50)
    assert len(x) <= 50 and np.all(np.diff(x) >= 0) and np.all(np.diff(y) > 0)
    assert y[-1] == 1.0 and x[-1] == e.max() and x[0] == e.min()
    # the CDF passes through the median
    i = np.searchsorted(y, 0.5)
    assert x[max(i - 1, 0)] <= np.median(e) <= x[min(i + 1, len(x) - 1)]
    x, y = latency_cdf(np.array([np.nan, 2.0, 1.0]))
    np.testing.assert_array_equal(x, [1.0, 2.0])
    np.testing.assert_array_equal(y, [0.5, 1.0])
