"""The README's accuracy table is the one `python -m asrsched.serving.accuracy` makes from the committed real-engine
results (never typed), and its numbers are the simulator's errors in those files."""

from pathlib import Path

import numpy as np

from asrsched.serving.accuracy import BEGIN, END, accuracy_markdown, accuracy_table, load_results

ROOT = Path(__file__).resolve().parents[2]


def test_readme_table_is_regenerated_from_the_committed_files():
    res = load_results(ROOT)
    md = accuracy_markdown(accuracy_table(res), res)
    readme = (ROOT / "README.md").read_text()
    block = readme.split(BEGIN, 1)[1].split(END, 1)[0].strip()
    assert block == md.strip(), "run: python -m asrsched.serving.accuracy --write"


def test_the_table_is_the_median_and_mean_of_the_cells_errors():
    res = load_results(ROOT)
    tab = accuracy_table(res).set_index(["group", "regime"])
    v = res[(res.engine == "vllm") & (res.regime == "stable")]
    e = np.abs(v.sim_p90_e2el_err_pct.to_numpy(float))
    assert tab.loc[("vllm", "stable"), "p90_e2el_median"] == np.median(e)
    assert tab.loc[("vllm", "stable"), "p90_e2el_mean"] == np.mean(e)
    assert tab.loc[("all", "stable"), "cells"] + tab.loc[("all", "overload"), "cells"] == len(res) >= 28
    # the error is the prediction against the measurement of the same cell
    r = res.iloc[0]
    assert np.isclose(r.sim_p50_e2el_err_pct, 100 * (r.sim_p50_e2el_s / r.p50_e2el_s - 1))
