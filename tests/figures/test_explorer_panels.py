"""The explorers as panels: they start where the notebook is, survive a saved or batch-executed notebook (a static
image, the figure in the saved widget state, no binary buffers), and export their view under a name made of the
explorer's key and its control values, with a sidecar of its state."""

import base64
import json
import os
import re
import struct
import time
import warnings
from pathlib import Path

import numpy as np
import pandas as pd
from extras import need

need("plotly", "ipywidgets")

import ipywidgets as W
import pytest

from asrsched.core.metrics import latency_cdf, summarize
from asrsched.core.service import default_service_model
from asrsched.core.workloads import Drift, make_source
from asrsched.figures import outputs, panel, style
from asrsched.figures import widgets as widgets_module
from asrsched.figures.panel import ExplorerFigure, Panel, control_state, send_figure_state
from asrsched.figures.widgets import drift_explorer, kappa_explorer, policy_explorer
from asrsched.sim.overload import OverloadWarning
from asrsched.sim.sweep import point_records

CHROMIUM = Path(os.environ.get("BROWSER_PATH") or "/usr/bin/chromium")


def _controls(p: Panel) -> dict:
    return control_state(p.controls)


# ----------------------------------------------------------------------------------- first view = the notebook's
def test_policy_explorer_starts_at_the_given_run_and_computes_it():
    """Every argument lands in its control, and the first view is the run the batch path computes for them
    (the same point_records call: identical CDFs), not the slider defaults."""
    sm = default_service_model().with_kappa({"en": 2.6, "es": 4.4, "de": 4.1, "id": 4.0})
    with warnings.catch_warnings():
        warnings.simplefilter("error", OverloadWarning)  # the explorer shows overload as its badge, never warns
        p = policy_explorer(
            rate=31.5, policy="hrrn", workload="uniform", n_requests=240, seed=3, max_num_seqs=16, service=sm
        )
    c = _controls(p)
    assert c["rate (req/s)"] == 31.5 and p.controls[0].max >= 31.5  # beyond the usual 1-25: widened, not clipped
    assert c["policy"] == "hrrn" and c["workload"] == "uniform" and c["max_num_seqs"] == 16
    assert c["kappa (tok/s)"] == pytest.approx(2.6)  # KAPPA None: the profile's kappa of the workload's language
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", OverloadWarning)
        ref = point_records("uniform", 31.5, ["fcfs", "hrrn"], seed=3, n_requests=240, max_num_seqs=16, service=sm)
    for tr in p.figure.data:
        x, y = latency_cdf(ref[tr.name].records["e2el"].to_numpy(), points=300)
        np.testing.assert_allclose(tr.x, x)
        np.testing.assert_allclose(tr.y, y)
    assert "n = 240" in p.figure.layout.title.text and "31.5 req/s" in p.figure.layout.title.text
    # a notebook's KAPPA overrides every language, as the batch path's kappa= does
    q = policy_explorer(rate=8, kappa=5.5, n_requests=200, service=sm)
    assert _controls(q)["kappa (tok/s)"] == 5.5
    ref = point_records("librispeech", 8, ["fcfs"], n_requests=200, service=sm, kappa=5.5)["fcfs"].records
    np.testing.assert_allclose(q.figure.data[0].x, latency_cdf(ref["e2el"].to_numpy(), points=300)[0])


def test_policy_explorer_says_what_served_means_with_the_runs_numbers():
    """The served rate is summarize's request_throughput (one definition); the note beside the table states the
    window and splits the gap to the offered rate into this trace's own arrival rate and the drain."""
    p = policy_explorer(rate=10, n_requests=300)
    note = re.sub(r"<[^>]+>", " ", p.children[4].value)
    rec = point_records("librispeech", 10, ["fcfs", "sjf"], n_requests=300, kappa=3.3)["sjf"].records
    s = summarize(rec)
    arr = rec["arrival"].to_numpy()
    assert "served = completed / (last finish − first arrival)" in note
    assert f"{s['completed']} requests in {s['duration_s']:.1f} s = {s['request_throughput']:.2f} req/s" in note
    assert f"arrivals came over {np.ptp(arr):.1f} s ({len(arr) / np.ptp(arr):.2f} req/s" in note
    assert f"then {s['duration_s'] - np.ptp(arr):.1f} s of drain" in note
    # the two parts account for the whole window: served = n / (arrival span + drain)
    assert s["request_throughput"] == pytest.approx(len(arr) / (np.ptp(arr) + rec["finish"].max() - arr.max()))


def test_drift_explorer_replays_the_notebooks_phases_seed_and_window():
    phases = [[0, "uniform"], [40, "librispeech"]]
    p = drift_explorer(rate=6, ramp_s=20, phases=phases, seed=2, window_s=10, policies=("fcfs", "sjf"), n_requests=400)
    assert _controls(p) == {"rate (req/s)": 6, "ramp (s)": 20}
    assert re.search(r"ρ uniform [\d.]+, librispeech [\d.]+", p.figure.layout.title.text)
    drift = Drift([(0.0, make_source("uniform")), (40.0, make_source("librispeech"))], ramp_s=20)
    ref = point_records(drift, 6, ["fcfs", "sjf"], seed=2, n_requests=400)
    for tr in p.figure.data:
        d = ref[tr.name].records
        g = d.groupby((d.arrival // 10) * 10)["e2el"].quantile(0.9)
        np.testing.assert_allclose(tr.x, g.index)
        np.testing.assert_allclose(tr.y, g.values)


def _profile_rows() -> pd.DataFrame:
    rng = np.random.default_rng(1)
    n = 14
    audio = rng.uniform(2, 20, n)
    steps = np.round(3.3 * audio + rng.normal(0, 1.5, n))
    return pd.DataFrame(
        {
            "utt_id": [f"en-{i}" for i in range(n)],
            "language": "en",
            "audio_s": audio,
            "speech_s": audio * 0.9,
            "decode_steps": steps,
            "tokens_generated": steps,
            "tokens_kept": steps - 2,
            "tokens_text": steps - 3,
            "ok": True,
            "silence": [False] * 12 + [True] * 2,
        }
    )


def test_kappa_explorer_fits_what_the_run_fitted(monkeypatch):
    """Held-back rows stay out of the fit (and are drawn as held), with the run's token and duration columns,
    bootstrap size, seed and other fit arguments."""
    rows = _profile_rows()
    held = rows.iloc[[1, 5]]
    calls = {}
    real_fit, real_fig = widgets_module.fit_kappa, widgets_module.fig_kappa

    def fit_spy(d, **kw):
        calls.setdefault("fit", (d, kw))
        return real_fit(d, **kw)

    def fig_spy(d, kf, **kw):
        calls.setdefault("fig", kw)
        return real_fig(d, kf, **kw)

    monkeypatch.setattr(widgets_module, "fit_kappa", fit_spy)
    monkeypatch.setattr(widgets_module, "fig_kappa", fig_spy)
    p = kappa_explorer(rows, held=held, tokens="tokens_kept", duration="speech_s", n_boot=120, seed=7, min_rows=3)
    d, kw = calls["fit"]
    assert sorted(d.index) == [i for i in range(12) if i not in (1, 5)]  # no held row, no silence clip
    assert kw == dict(tokens="tokens_kept", duration="speech_s", n_boot=120, seed=7, min_rows=3)
    assert calls["fig"]["held"] is held
    assert _controls(p) == {"tokens": "tokens_kept", "duration": "speech_s", "include clips with silence": False}


def test_ab_explorers_start_at_the_studys_horizon_and_scenario():
    """06's DQ horizon L (150 in its small set) starts the L slider and the first study; 05's L and scenario too."""
    from study_params import TINY_ASR_STUDY

    from asrsched.abtest.asr_fleet import ASRStudyConfig
    from asrsched.figures.ab_widgets import ab_explorer, estimator_explorer

    p = ab_explorer(ASRStudyConfig(**TINY_ASR_STUDY), reps=2, n_requests=2500)
    L_w = p.controls[3]
    assert (L_w.description, L_w.value) == ("L (0 = 30 s)", 150)
    first = [list(tr.y) for tr in p.figure.data]
    L_w.value = 0
    assert [list(tr.y) for tr in p.figure.data] != first  # L matters to the view ...
    L_w.value = 150
    assert [list(tr.y) for tr in p.figure.data] == first  # ... and the first view was the one at L = 150
    e = estimator_explorer(lam=0.7, n_servers=6, reps=3, n_requests=30_000, L=400, scenario="switchback", block_len=80)
    assert _controls(e)["L (0 = 30·N·λ)"] == 400 and "switchback: N = 6" in e.figure.layout.title.text


# ---------------------------------------------------------------------------------- a panel outside a live kernel
def _messages(fig):
    sent = []
    fig._send = lambda msg, buffers=None: sent.append((msg, buffers))
    return sent


@pytest.mark.parametrize("with_setup", [False, True], ids=["plain", "after setup()"])
def test_the_figure_state_is_sent_once_whole_and_without_binary_buffers(with_setup):
    """What nbclient saves as the widget state: the figure's traces and layout, as JSON (no buffers, which a
    restore cannot put back under a one-off message's None), NaN as null; also with setup()'s state refresh."""
    if with_setup:
        style.setup()
    try:
        fig = ExplorerFigure()
        sent = _messages(fig)
        fig.add_scatter(x=np.arange(4.0), y=np.array([1.0, np.nan, 3.0, 2.0]), name="a")
        fig.layout.title = "t"
        assert sent and all(not b for _, b in sent)  # the one-off addTraces message carries lists too
        n = len(sent)
        send_figure_state(fig)
        full = [m["state"] for m, _ in sent[n:] if {"_widget_data", "_widget_layout"} <= set(m.get("state", {}))]
        assert full and all(not b for _, b in sent[n:])
        data = full[-1]["_widget_data"]
        assert data[0]["x"] == [0.0, 1.0, 2.0, 3.0] and data[0]["y"] == [1.0, None, 3.0, 2.0]
        assert full[-1]["_widget_layout"]["title"]["text"] == "t"
        json.dumps(full[-1], allow_nan=False)  # what the kernel's message packer needs
    finally:
        if with_setup:
            style.teardown()


def test_a_panel_without_static_rendering_says_why_and_never_fails(monkeypatch):
    def broken(*_a, **_k):
        raise RuntimeError("static figure export (png/svg/pdf) needs Debian's chromium: apt-get install; HTML none")

    monkeypatch.setattr(panel, "export_figure", broken)
    fig = ExplorerFigure()
    p = Panel([fig], fig=fig, name="demo", notebook="99_demo", controls=[])
    data = p._repr_mimebundle_()
    assert "image/png" not in data and "application/vnd.jupyter.widget-view+json" in data
    assert data["text/plain"] == (
        "demo: an interactive explorer (controls over a plotly figure; live with a running kernel); "
        "no static image of it: static figure export (png/svg/pdf) needs Debian's chromium: apt-get install"
    )


@pytest.mark.slow  # starts Chromium (kaleido)
@pytest.mark.skipif(not CHROMIUM.exists(), reason="Debian chromium not installed")
def test_a_panel_shows_as_widget_view_png_of_its_first_view_and_one_line(monkeypatch):
    need("kaleido")
    p = policy_explorer(rate=12, n_requests=150)
    data, meta = p._repr_mimebundle_()
    assert set(data) == {"application/vnd.jupyter.widget-view+json", "image/png", "text/plain"}
    png = base64.b64decode(data["image/png"])
    width, height = struct.unpack(">II", png[16:24])  # the IHDR chunk
    assert png[:8] == b"\x89PNG\r\n\x1a\n" and (width, height) == (900 * style.PNG_SCALE, 420 * style.PNG_SCALE)
    assert meta == {"image/png": {"width": 900}} and data["text/plain"].startswith("policy_explorer: an interactive")
    p.controls[0].value = 20  # later views do not change the static image of the first one
    assert p._repr_mimebundle_()[0]["image/png"] == data["image/png"]


@pytest.mark.slow  # runs a notebook in a Jupyter kernel
def test_an_executed_notebook_keeps_the_explorers_image_and_figure_state(tmp_path, monkeypatch):
    """nbclient (what papermill, ``asrsched run`` and Voila use) saves the explorer with a PNG beside the widget
    view, and its widget state holds the figure (two CDFs) with no binary buffer."""
    need("nbformat", "kaleido")
    import nbformat
    from nbclient import NotebookClient
    from nbformat.v4 import new_code_cell, new_notebook

    monkeypatch.setenv(outputs.RUNS_ENV, str(tmp_path / "runs"))
    src = (
        "from asrsched.figures.style import setup\nsetup()\nfrom asrsched.figures.widgets import policy_explorer\n"
        "policy_explorer(rate=9, n_requests=120)"
    )
    nb = new_notebook(cells=[new_code_cell(src)])
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
    NotebookClient(nb, kernel_name="python3", timeout=120, resources={"metadata": {"path": str(tmp_path)}}).execute()
    nbformat.validate(nb)
    (out,) = nb.cells[0].outputs
    keys = {"application/vnd.jupyter.widget-view+json", "text/plain"} | ({"image/png"} if CHROMIUM.exists() else set())
    assert keys <= set(out["data"]), list(out["data"])
    state = nb.metadata.widgets["application/vnd.jupyter.widget-state+json"]["state"]
    figs = [m for m in state.values() if "_widget_data" in m["state"]]
    assert len(figs) == 1 and [t["name"] for t in figs[0]["state"]["_widget_data"]] == ["fcfs", "sjf"]
    assert not any(m.get("buffers") for m in state.values())


# ---------------------------------------------------------------------------------------------- export this view
def test_export_names_the_view_by_key_and_values_and_writes_its_state(tmp_path, monkeypatch):
    """A planted negative value keeps its sign in the name (m for minus); the sidecar has every control and the
    time; the same view exported again writes the same files."""
    for k in (outputs.ROOT_ENV, outputs.FIGURES_ENV):
        monkeypatch.delenv(k, raising=False)
    monkeypatch.setattr(outputs, "_RUN_DIRS", {})
    monkeypatch.setenv(outputs.RUNS_ENV, str(tmp_path / "runs"))
    monkeypatch.setenv(style.FORMATS_ENV, "html")
    shift = W.FloatSlider(value=-0.5, min=-1, max=1, description="shift (s)")
    metric = W.Dropdown(options=[("mean E2EL", ("e2el", "mean")), ("P90 TTFT", ("ttft", "p90"))], description="metric")
    on = W.Checkbox(value=True, description="include silence")
    n = W.IntSlider(value=12, min=1, max=20, description="replicas")
    fig = ExplorerFigure()
    fig.add_scatter(x=[1, 2], y=[3, 4], name="a")
    fig.layout.title = "effect −0.5 s"
    p = Panel(
        [W.HBox([shift, metric, on, n]), fig],
        fig=fig,
        name="demo_explorer",
        notebook="99_demo",
        controls=[shift, metric, on, n],
    )
    button, status = p.children[-1].children
    t0 = time.time()
    button.click()
    (run,) = (tmp_path / "runs" / "99_demo").iterdir()
    stem = "demo_explorer_m0p5_e2el-mean_on_12"
    assert {x.name for x in run.glob("demo_explorer_*")} == {f"{stem}.html", f"{stem}.json"}
    side = json.loads((run / f"{stem}.json").read_text())
    assert side["controls"] == {"shift (s)": -0.5, "metric": ["e2el", "mean"], "include silence": True, "replicas": 12}
    assert side["figure"] == "demo_explorer" and side["notebook"] == "99_demo" and f"{stem}.html" in side["files"]
    stamp = time.mktime(time.strptime(side["time"][:19], "%Y-%m-%dT%H:%M:%S"))
    assert t0 - 2 <= stamp <= time.time() + 1
    assert f"wrote <code>{stem}</code> (html, json)" in status.value
    shift.value, metric.value = 0.25, ("ttft", "p90")
    button.click()
    assert (run / "demo_explorer_0p25_ttft-p90_on_12.json").exists()
    button.click()  # the same view again: the same files
    assert len(list(run.glob("*.html"))) == 2


def test_every_explorer_exports_under_its_own_key():
    """Each explorer is a Panel named after its function; its export button is the last row."""
    from study_params import TINY_ASR_STUDY

    from asrsched.abtest.asr_fleet import ASRStudyConfig
    from asrsched.figures.ab_widgets import ab_explorer, estimator_explorer

    built = {
        "policy_explorer": policy_explorer(rate=9, n_requests=120),
        "drift_explorer": drift_explorer(rate=9, n_requests=300, policies=("fcfs",)),
        "kappa_explorer": kappa_explorer(_profile_rows(), n_boot=50, min_rows=3),
        "estimator_explorer": estimator_explorer(lam=0.7, n_servers=6, reps=3, n_requests=30_000),
        "ab_explorer": ab_explorer(ASRStudyConfig(**TINY_ASR_STUDY), reps=2, n_requests=2500),
    }
    for name, p in built.items():
        assert isinstance(p, Panel) and p.name == name and isinstance(p.figure, ExplorerFigure)
        assert p.children[-1].children[0].description == "export this view"
        assert all(w.description for w in p.controls)
