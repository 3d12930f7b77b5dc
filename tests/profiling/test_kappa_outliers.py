"""The kappa fit against a hallucinated clip: the outlier rule (asrsched.profiling.outliers), the fit that
leaves the clip out and names it (fit_kappa, fit_profile, kappa.csv), and the figure that marks it (fig_kappa)."""

import colorsys
import itertools
import math
import warnings

import numpy as np
import pandas as pd
import pytest
from extras import need
from profile_tables import synthetic

from asrsched.profiling.fit import fit_kappa
from asrsched.profiling.outliers import rate_outliers
from asrsched.profiling.run import fit_profile, run_profile

TRUE_KAPPA = {"en": 4.0, "es": 5.5}


def planted(factor=10.0, n=12, seed=3):
    """``synthetic`` rows with the longest Spanish clip's tokens multiplied by ``factor`` (a hallucination)."""
    df = synthetic(TRUE_KAPPA, n=n, seed=seed)
    es = df.index[df["language"] == "es"]
    i = df.loc[es, "audio_s"].idxmax()
    df.loc[i, ["decode_steps", "tokens_generated", "tokens_kept", "tokens_text"]] *= factor
    df.loc[i, "utt_id"] = "es-hallucinated-07"
    return df, i


def ratio(df):
    return df["decode_steps"].sum() / df["audio_s"].sum()


def test_one_hallucinated_clip_is_left_out_named_and_kappa_recovered():
    df, i = planted()
    es = df[df["language"] == "es"]
    clean = es.drop(index=i)
    old = fit_kappa(df, n_boot=300, outlier_z=None).table.set_index("language").loc["es"]
    assert old.kappa == pytest.approx(ratio(es)) and old.kappa > 1.5 * TRUE_KAPPA["es"]  # what one clip did
    kf = fit_kappa(df, n_boot=1000, seed=1)
    t = kf.table.set_index("language")
    # es is the ratio of sums over the other 11 clips, within a few % of the truth; en is untouched
    assert t.loc["es", "kappa"] == pytest.approx(ratio(clean), rel=1e-12)
    assert t.loc["es", "kappa"] == pytest.approx(TRUE_KAPPA["es"], rel=0.04)
    assert t.loc["en", "kappa"] == pytest.approx(ratio(df[df["language"] == "en"]), rel=1e-12)
    # the clip is named with its reason, and counted per language in the table (kappa.csv's columns)
    assert list(kf.outliers["clip"]) == ["es-hallucinated-07"] and list(kf.outliers["row"]) == [i]
    assert "hallucination" in kf.outliers["reason"].iloc[0] and kf.outliers["z"].iloc[0] > 3.5
    assert kf.outliers["rate"].iloc[0] == pytest.approx(df.loc[i, "decode_steps"] / df.loc[i, "audio_s"])
    assert t.loc["es", "n_outliers"] == 1 and t.loc["es", "outliers"] == "es-hallucinated-07"
    assert t.loc["en", "n_outliers"] == 0 and t.loc["es", "n"] == len(clean) and t.loc["en", "n"] == 12
    assert "es-hallucinated-07" in kf.summary() and "1 outlier(s) left out" in kf.summary()
    # the R^2 is the kept clips' (one clip had ruined it), and the CI is the kept clips' bootstrap:
    # inside their smallest and largest rate (every resample's kappa is a weighted mean of them)
    assert old.r2 < 0.5 < 0.9 < t.loc["es", "r2"]
    rates = clean["decode_steps"] / clean["audio_s"]
    lo, hi = kf.ci["es"]
    assert rates.min() <= lo <= t.loc["es", "kappa"] <= hi <= rates.max()
    assert lo < TRUE_KAPPA["es"] < hi < old.kappa
    assert kf.outlier_mask(df).sum() == 1 and kf.outlier_mask(df).loc[i]
    other = df.copy()
    other.loc[i, "decode_steps"] = 1  # another table with a different clip under the same label
    assert not kf.outlier_mask(other).any()


def test_clean_data_leaves_no_clip_out():
    """Poisson counts (2-55 s clips), counts without noise, and speaking rates that vary by 20 %: the rule
    leaves out (almost) nothing; a rule without the floor or the counting noise would leave out dozens."""
    flagged = total = 0
    for s in range(50):
        kf = fit_kappa(synthetic(TRUE_KAPPA, n=40, seed=1000 + s), n_boot=1)
        flagged += len(kf.outliers)
        total += int(kf.table["n"].sum() + kf.table["n_outliers"].sum())
    assert total == 4000 and flagged <= 3  # a 3.5-sd rule: about one in 2000 by chance
    for n in (4, 8, 40):
        kf = fit_kappa(synthetic(TRUE_KAPPA, n=n, seed=5, noise=False), n_boot=1)  # only rounding differs
        assert kf.outliers.empty and kf.table["n_outliers"].eq(0).all()
    rng = np.random.default_rng(0)
    flagged = 0
    for _ in range(300):  # six clips a language, as in notebook 01's default run
        d = rng.uniform(2, 30, 6)
        flagged += int(rate_outliers(d, rng.poisson(4.5 * d * rng.lognormal(0, 0.2, 6))).outlier.sum())
    assert flagged <= 9  # of 1800


def test_spread_floor_keeps_an_ordinary_slow_speaker():
    """Four 30 s clips of which one is read 30 % slower (tokens per second measured in this project's base
    run): four rates so close give a MAD that alone would call it an outlier; the floor does not."""
    d = np.full(4, 30.0)
    y = np.rint(np.array([4.13, 4.23, 2.79, 3.99]) * d)
    assert not rate_outliers(d, y).outlier.any()
    assert rate_outliers(d, y, min_spread=0.0).outlier.tolist() == [False, False, True, False]
    # too few tokens is an outlier too, with its own reason; two clips are never judged
    d = np.array([6.0, 8.0, 10.0, 12.0, 14.0])
    v = rate_outliers(d, np.array([27, 36, 0, 55, 62]))
    assert v.outlier.tolist() == [False, False, True, False, False] and "fewer tokens" in v.reason(2, 3.5)
    assert not rate_outliers(d[:2], np.array([27, 900])).outlier.any()


def test_too_few_clips_left_is_said_not_fitted():
    df, i = planted(n=4)
    with pytest.warns(UserWarning, match="kappa for 'es' not fitted: only 3 clip"):
        kf = fit_kappa(df, n_boot=50)
    assert "es" not in kf.kappa and "es-hallucinated-07" in kf.skipped["es"]
    assert "leaving out 1 outlier" in kf.skipped["es"] and list(kf.outliers["clip"]) == ["es-hallucinated-07"]
    assert set(kf.kappa) == {"en"}


@pytest.mark.parametrize(
    "kw,name",
    [
        (dict(outlier_z=-1.0), "outlier_z"),
        (dict(outlier_z=0), "outlier_z"),
        (dict(outlier_z=math.nan), "outlier_z"),
        (dict(outlier_z=math.inf), "outlier_z"),
        (dict(outlier_z="3.5"), "outlier_z"),
        (dict(outlier_z=True), "outlier_z"),
        (dict(min_spread=-0.1), "min_spread"),
        (dict(min_spread=math.inf), "min_spread"),
        (dict(n_boot=0), "n_boot"),
        (dict(n_boot=2.5), "n_boot"),
    ],
)
def test_bad_rule_parameters_are_named(kw, name):
    df = synthetic(n=6)
    with pytest.raises(ValueError, match=f"^{name} must be"):
        fit_kappa(df, **kw)
    if name == "outlier_z":
        with pytest.raises(ValueError, match=f"^{name} must be"):
            fit_profile(df, **kw)


def test_run_profile_checks_outlier_z_before_any_work(tmp_path):
    with pytest.raises(ValueError, match="^outlier_z must be a finite number > 0"):
        run_profile(out_dir=tmp_path / "run", outlier_z=-3.5)
    assert not (tmp_path / "run").exists()


def test_profile_run_records_the_exclusion_and_refits_it(tmp_path):
    df, i = planted()
    run = fit_profile(df, name="syn", clock="wall", holdout_frac=0.0, n_boot=100)
    clean = df[df["language"] == "es"].drop(index=i)
    assert run.service_model.kappa["es"] == pytest.approx(ratio(clean), rel=1e-12)
    run.measurements.to_csv(tmp_path / "measurements.csv", index=False)
    paths = run.save(tmp_path)
    kt = pd.read_csv(paths["kappa"])
    per = kt.set_index(["tokens", "language"])
    for tok in ("decode_steps", "tokens_generated", "tokens_kept", "tokens_text"):
        assert per.loc[(tok, "es"), "n_outliers"] == 1 and per.loc[(tok, "en"), "n_outliers"] == 0
        assert per.loc[(tok, "es"), "outliers"] == "es-hallucinated-07"
    assert "left out: es es-hallucinated-07" in run.report()
    fit = run.service_model.fit  # the profile's JSON says what its kappa left out, and by which rule
    assert [o["clip"] for o in fit["kappa_outliers"]] == ["es-hallucinated-07"] and fit[
        "kappa_outlier_rule"
    ] == run.kappa.rule
    again = fit_profile(pd.read_csv(tmp_path / "measurements.csv"), clock="wall", holdout_frac=0.0, n_boot=100)
    assert again.service_model.kappa["es"] == pytest.approx(run.service_model.kappa["es"])
    off = fit_profile(df, clock="wall", holdout_frac=0.0, n_boot=100, outlier_z=None)
    assert off.kappa.outliers.empty and off.service_model.kappa["es"] == pytest.approx(ratio(df[df.language == "es"]))


def _hue(color: str) -> float:
    rgb = [int(color.lstrip("#")[k : k + 2], 16) / 255 for k in (0, 2, 4)] if color.startswith("#") else None
    if rgb is None:  # rgba(r, g, b, a)
        rgb = [float(v) / 255 for v in color[color.index("(") + 1 : color.index(")")].split(",")[:3]]
    return 360 * colorsys.rgb_to_hsv(*rgb)[0]


def _rgb(color: str) -> tuple[int, ...]:
    if color.startswith("#"):
        return tuple(int(color[k : k + 2], 16) for k in (1, 3, 5))
    return tuple(int(float(v)) for v in color[color.index("(") + 1 : color.index(")")].split(",")[:3])


def test_figure_marks_names_and_counts_the_outlier_in_each_language_colour():
    need("plotly")
    from asrsched.figures.profiling import LANGUAGE_COLORS, fig_kappa, language_color

    df, i = planted()
    held = synthetic(TRUE_KAPPA, n=2, seed=4)
    kf = fit_kappa(df, n_boot=200)
    fig = fig_kappa(df, kf, held=held)
    out = [t for t in fig.data if (t.hovertemplate or "").startswith("left out:")]
    assert {t.name for t in out} == {"Spanish left out"}
    top = next(t for t in out if t.yaxis == "y")
    assert list(top.text) == ["es-hallucinated-07"] and "left out" in top.hovertemplate
    assert "hallucination" in top.customdata[0][2] and float(top.customdata[0][1]) == df.loc[i, "decode_steps"]
    # the clip sits on the edge of an axis the kept clips set (it would stretch it tenfold), as a triangle
    y_hi = fig.layout.yaxis.range[1]
    kept = df.drop(index=i)
    assert kept["decode_steps"].max() < y_hi < 1.5 * max(kept["decode_steps"].max(), 5.5 * df["audio_s"].max())
    assert df.loc[i, "decode_steps"] > y_hi and list(top.marker.symbol) == ["triangle-up"]
    assert top.y[0] <= y_hi
    # the title states the kept clips' fit and the subtitle counts and names what was left out, with the rule
    title = fig.layout.title.text
    r2 = kf.table["r2"].min()
    assert f"R² ≥ {r2:.2f}" in title and f"n={int(kf.table['n'].sum())} clips kept" in title and r2 > 0.9
    assert "1 clip left out" in title and "es-hallucinated-07" in title and kf.rule in title
    legend = [t.name for t in fig.data if t.showlegend is not False]
    assert any(n.startswith("Spanish: κ=") and n.endswith("1 left out") for n in legend)
    # every trace of a language (band, its edges, line, markers, the outlier) is drawn in that language's colour
    for lang, name in (("en", "English"), ("es", "Spanish")):
        c = _rgb(language_color(lang))
        traces = [t for t in fig.data if t.legendgroup == lang]
        band = [t for t in traces if t.fill == "toself"]
        assert len(band) == 1 and _rgb(band[0].fillcolor) == c and _rgb(band[0].line.color) == c
        for t in traces:
            col = t.line.color if t.mode == "lines" else t.marker.color
            if col == "white":  # held-back clips: white inside, the colour on the rim
                col = t.marker.line.color
            assert _rgb(col) == c, (name, t.name)
    # and no two languages' colours share a hue, so a pale band cannot read as another language
    hues = {lg: _hue(c) for lg, c in LANGUAGE_COLORS.items()}
    for a, b in itertools.combinations(hues, 2):
        assert min(abs(hues[a] - hues[b]), 360 - abs(hues[a] - hues[b])) >= 30, (a, b)


def test_figure_of_clean_data_marks_nothing():
    need("plotly")
    from asrsched.figures.profiling import fig_kappa

    df = synthetic(TRUE_KAPPA, n=12, seed=3)
    kf = fit_kappa(df, n_boot=100)
    fig = fig_kappa(df, kf)
    assert not [t for t in fig.data if (t.hovertemplate or "").startswith("left out:")]
    assert "no clip left out" in fig.layout.title.text
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        small, _ = planted(n=4)
        kf = fit_kappa(small, n_boot=50)
    fig = fig_kappa(small, kf)
    assert "es not fitted" in fig.layout.title.text
    assert [t.name for t in fig.data if (t.hovertemplate or "").startswith("left out:")] == ["Spanish left out"]
