"""The claims index at the top of the gallery (asrsched.app.claims): each claim of the two studies
beside our number, its CI, load, regime and a verdict computed from the CI, from results tables."""

from __future__ import annotations

import shutil
from pathlib import Path

import pandas as pd
import pytest
from extras import need

from asrsched.app.claims import (
    AB_CLAIMS_TABLE,
    ENGINE_TABLE,
    HEADLINE_TABLE,
    MIXED_MAP_TABLE,
    claims_index_markdown,
    claims_rows,
    headline_verdict,
)

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize(
    ("paper", "lo", "hi", "claim", "verdict"),
    [
        (-73, -90, -60, "", "matches"),
        (-73, -20.7, -15.4, "", "smaller here"),
        (-73, -91, -85.8, "", "larger here"),
        (97, -3.2, -0.4, "", "opposite here"),
        (97, -15, 140, "", "matches"),
        (-28, -13.5, 11.1, "", "no change here"),
        (24, 1.9, 3.5, "P90 degradation capped at 24 %", "holds (below the cap)"),
        (24, 30, 40, "capped", "fails (above the cap)"),
        (24, 20, 30, "capped", "inconclusive"),
        (-73, float("nan"), 1, "", "no estimate"),
    ],
)
def test_headline_verdicts(paper, lo, hi, claim, verdict):
    assert headline_verdict(paper, lo, hi, claim) == verdict


def _headline(root: Path, ours: float, lo: float, hi: float) -> None:
    (root / HEADLINE_TABLE).parent.mkdir(parents=True, exist_ok=True)
    pd.DataFrame(
        [
            {
                "claim": "SJF, LibriSpeech, high load: P50 E2EL down by up to 73 %",
                "paper_pct": -73.0,
                "ours_pct": ours,
                "ours_ci_low": lo,
                "ours_ci_high": hi,
                "rho": 0.95,
                "regime": "stable",
                "n_requests": 2000,
                "policy": "sjf",
                "workload": "librispeech",
                "metric": "p50_e2el_ms",
                "n_seeds": 64,
            }
        ]
    ).to_csv(root / HEADLINE_TABLE, index=False)


def test_rows_come_from_the_tables_present_and_link_only_files_that_exist(tmp_path):
    rows, missing = claims_rows(tmp_path)
    assert rows == [] and missing == [HEADLINE_TABLE, ENGINE_TABLE, AB_CLAIMS_TABLE, MIXED_MAP_TABLE]
    _headline(tmp_path, -18.1, -20.7, -15.4)
    (row,), missing = claims_rows(tmp_path)
    assert row["here"] == "−18.1 % [−20.7 %, −15.4 %]" and row["verdict"] == "smaller here"
    assert "ρ 0.95, **stable**, 64 seeds × 2000 requests" == row["setting"]
    assert row["links"] == f"[table]({HEADLINE_TABLE})"  # the figure was not exported: no dead link
    (tmp_path / "02_policy_sweep" / "relative_change_librispeech.html").write_text("<html></html>")
    _headline(tmp_path, -70.0, -80.0, -60.0)  # another run's numbers: the verdict follows them
    (row,), _ = claims_rows(tmp_path)
    assert row["verdict"] == "matches" and row["links"].startswith(
        "[figure](02_policy_sweep/relative_change_librispeech.html)"
    )
    md = "\n".join(claims_index_markdown(tmp_path))
    assert md.startswith("## Claims index") and f"`{ENGINE_TABLE}`" in md.split("Not in this gallery")[1]


def test_the_committed_results_give_the_engine_and_ab_rows(tmp_path):
    for rel in (ENGINE_TABLE, AB_CLAIMS_TABLE, AB_CLAIMS_TABLE.replace("claims.csv", "run.json"), MIXED_MAP_TABLE):
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(ROOT / "figures" / rel, tmp_path / rel)
    rows, missing = claims_rows(tmp_path)
    assert missing == [HEADLINE_TABLE]
    eng = pd.read_csv(ROOT / "figures" / ENGINE_TABLE)
    engine_rows = [r for r in rows if r["study"].startswith("scheduling (")]
    # SJF and HRRN x P50/P90 for every engine in the committed study, at its highest stable load
    assert len(engine_rows) == 4 * eng.engine.nunique()
    for r in engine_rows:
        e = r["study"][len("scheduling (") : -1]
        rho = eng[(eng.engine == e) & (eng.regime == "stable")].rho.max()
        assert f"ρ {rho:g}, **stable**" in r["setting"]
    claims = pd.read_csv(ROOT / "figures" / AB_CLAIMS_TABLE)
    ab = [r for r in rows if r["study"] == "A/B estimators"]
    assert len(ab) == 4
    mixed = next(r for r in ab if r["claim"].startswith("Mixed DQ: 2–5×"))
    n_fail = int((claims.verdict_mixed_2_5x == "fails").sum())
    assert f"fails in {n_fail}" in mixed["verdict"] and f"of {len(claims)} scenarios" in mixed["verdict"]
    assert f"{claims.mixed_sd_reduction.min():.2f}–{claims.mixed_sd_reduction.max():.2f}×" in mixed["here"]
    # the map's row: its verdicts counted over the in-experiment cells at the default L, with where it holds
    m = pd.read_csv(ROOT / "figures" / MIXED_MAP_TABLE)
    t = m[(m.L_factor == 1.0) & (m.alpha != "oracle")]
    (row,) = [r for r in rows if r["study"] == "A/B estimators (mixed-DQ map)"]
    assert f"of {len(t)} cells" in row["verdict"]
    assert f"holds in {int((t.verdict == 'holds').sum())}" in row["verdict"] or not (t.verdict == "holds").any()
    for r in t[t.verdict == "holds"].itertuples():
        assert f"{r.law} / horizon in {r.unit}" in row["verdict"]
    assert row["links"] == f"[table]({MIXED_MAP_TABLE})"  # run.json not copied: no dead link


def test_the_gallery_opens_with_the_claims_index_and_does_not_call_committed_results_stale():
    need("plotly")  # the gallery reads figures back
    from asrsched.app.gallery import render_gallery, tracked_files

    figs = ROOT / "figures"
    if not tracked_files(figs):
        pytest.skip("not a git checkout")
    text = render_gallery(figs)
    first_section = text.index("\n## ")
    assert text[first_section:].startswith("\n## Claims index")
    assert text.index("## Claims index") < text.index("## How this gallery is made") < text.index("## 04_real_serving")
    for rel in (
        ENGINE_TABLE,
        "04_real_serving/real_engine_run.json",
        AB_CLAIMS_TABLE,
        "05_ab_estimators/full/run.json",
    ):
        nb, name = rel.split("/", 1)
        assert f"[`{name}`]({rel})" in text, rel
    stale = [line for line in text.splitlines() if line.startswith("Stale")]
    assert not any("real_engine_results.csv" in s or "vllm_step_times.csv" in s for s in stale), stale
