"""Figures and the interactive panel of the Whisper profiling notebook (01).

Every builder returns a plotly figure in the house style (:mod:`asrsched.figures.style`)
with a title that states what the data shows and axis titles with units.
Languages and duration sources take their colours from :func:`asrsched.figures.style.policy_color`.
"""

from __future__ import annotations

import numpy as np
import pandas as pd
import plotly.graph_objects as go
from plotly.subplots import make_subplots

from asrsched.core.service import ServiceModel
from asrsched.figures.style import policy_color
from asrsched.profiling.fit import KappaFit
from asrsched.profiling.measure import CLOCKS

__all__ = [
    "TOKEN_LABELS",
    "DURATION_LABELS",
    "fig_kappa",
    "fig_time_model",
    "fig_rtf",
    "fig_vad",
    "fig_batch",
    "fig_kappa_text",
]

TOKEN_LABELS = {
    "decode_steps": "decoder steps",
    "tokens_generated": "generated tokens",
    "tokens_kept": "transcript tokens",
    "tokens_text": "text tokens",
}
DURATION_LABELS = {
    "audio_s": "file duration",
    "speech_s": "true speech duration",
    "vad_silero_s": "silero VAD speech",
    "vad_energy_s": "energy VAD speech",
}


def _lang_name(lang: str) -> str:
    return {"en": "English", "es": "Spanish", "de": "German", "id": "Indonesian"}.get(lang, lang)


def fig_kappa(rows: pd.DataFrame, kfit: KappaFit, *, held: pd.DataFrame | None = None) -> go.Figure:
    """Tokens vs duration per language with the kappa line and its bootstrap CI; residuals below."""
    tok, dur = kfit.tokens, kfit.duration
    fig = make_subplots(rows=2, cols=1, shared_xaxes=True, row_heights=[0.72, 0.28], vertical_spacing=0.06)
    d = rows[rows["ok"].astype(bool)]
    xmax = float(d[dur].max()) * 1.05 if len(d) else 1.0
    xs = np.linspace(0, xmax, 50)
    for r in kfit.table.itertuples():
        c = policy_color(r.language)
        g = d[d["language"] == r.language]
        lab = f"{_lang_name(r.language)}: κ={r.kappa:.2f} [{r.ci_low:.2f}, {r.ci_high:.2f}] /s, R²={r.r2:.2f}"
        fig.add_trace(
            go.Scatter(
                x=np.r_[xs, xs[::-1]],
                y=np.r_[r.ci_high * xs, r.ci_low * xs[::-1]],
                fill="toself",
                fillcolor=c,
                opacity=0.15,
                line=dict(width=0),
                hoverinfo="skip",
                showlegend=False,
                legendgroup=r.language,
            ),
            row=1,
            col=1,
        )
        fig.add_trace(
            go.Scatter(
                x=xs, y=r.kappa * xs, mode="lines", line=dict(color=c, width=2), name=lab, legendgroup=r.language
            ),
            row=1,
            col=1,
        )
        fig.add_trace(
            go.Scatter(
                x=g[dur],
                y=g[tok],
                mode="markers",
                marker=dict(color=c, size=8),
                showlegend=False,
                legendgroup=r.language,
                text=g["utt_id"],
                hovertemplate="%{text}<br>%{x:.2f} s, %{y} tokens",
            ),
            row=1,
            col=1,
        )
        fig.add_trace(
            go.Scatter(
                x=g[dur],
                y=g[tok] - r.kappa * g[dur],
                mode="markers",
                marker=dict(color=c, size=7),
                showlegend=False,
                legendgroup=r.language,
            ),
            row=2,
            col=1,
        )
        if held is not None and len(held):
            h = held[(held["language"] == r.language) & held["ok"].astype(bool)]
            fig.add_trace(
                go.Scatter(
                    x=h[dur],
                    y=h[tok],
                    mode="markers",
                    showlegend=False,
                    legendgroup=r.language,
                    marker=dict(color="white", size=9, line=dict(color=c, width=2)),
                    hovertemplate="held back: %{x:.2f} s, %{y} tokens",
                ),
                row=1,
                col=1,
            )
    fig.add_hline(y=0, line=dict(color="#888", dash="dot"), row=2, col=1)
    ks = ", ".join(f"{r.language} {r.kappa:.1f}" for r in kfit.table.itertuples())
    r2 = kfit.table["r2"].min() if len(kfit.table) else float("nan")
    n = int(kfit.table["n"].sum()) if len(kfit.table) else 0
    fig.update_layout(
        title=f"{TOKEN_LABELS.get(tok, tok).capitalize()} against duration: κ = {ks} per s "
        f"(line through the origin, R² ≥ {r2:.2f}, n={n})",
        legend=dict(x=0.01, y=0.99, xanchor="left"),
        height=620,
    )
    fig.update_xaxes(title_text=f"{DURATION_LABELS.get(dur, dur)} (s)", row=2, col=1)
    fig.update_yaxes(title_text=f"{TOKEN_LABELS.get(tok, tok)} (count)", row=1, col=1)
    fig.update_yaxes(title_text="residual (tokens)", row=2, col=1)
    return fig


def fig_time_model(
    rows: pd.DataFrame, model: ServiceModel, holdout: dict | None = None, held: pd.DataFrame | None = None
) -> go.Figure:
    """Left: total time vs decoder tokens with the fitted line (one window); right: predicted vs measured.

    Times are on the model's clock (wall or process CPU time, ``model.fit["clock"]``).
    """
    tok = model.fit.get("tokens_column", "decode_steps")
    clock = model.fit.get("clock", "wall")
    T = CLOCKS[clock][0]
    what = "CPU time" if clock == "cpu" else "total time"
    d = rows[rows["ok"].astype(bool) & ~rows["silence"].astype(bool)]
    fig = make_subplots(
        rows=1,
        cols=2,
        horizontal_spacing=0.12,
        subplot_titles=("time vs tokens (line: 1 window; squares: 2+)", "predicted vs measured service time"),
    )
    for lang, g in d.groupby("language"):
        c = policy_color(lang)
        sym = np.where(g["windows_nominal"].to_numpy(float) > 1, "square-open", "circle")
        fig.add_trace(
            go.Scatter(
                x=g[tok],
                y=g[T],
                mode="markers",
                marker=dict(color=c, size=8, symbol=sym),
                name=_lang_name(lang),
                legendgroup=lang,
                hovertemplate="%{x} steps, %{y:.2f} s",
            ),
            row=1,
            col=1,
        )
        pred = model.service_time(g["audio_s"].to_numpy(float), lang, tokens=g[tok].to_numpy(float))
        fig.add_trace(
            go.Scatter(
                x=g[T],
                y=pred,
                mode="markers",
                marker=dict(color=c, size=8, symbol=sym),
                showlegend=False,
                legendgroup=lang,
            ),
            row=1,
            col=2,
        )
    xs = np.linspace(0, max(float(d[tok].max()) if len(d) else 1.0, 1.0) * 1.05, 20)
    fig.add_trace(
        go.Scatter(
            x=xs,
            y=model.encode_s_per_window + model.decode_s_per_token * xs + model.overhead_s,
            mode="lines",
            line=dict(color="#000", dash="dash"),
            name=(
                f"{model.encode_s_per_window:.2f} s/window + "
                f"{1000 * model.decode_s_per_token:.1f} ms/token + {model.overhead_s:.2f} s"
            ),
        ),
        row=1,
        col=1,
    )
    hi = float(d[T].max()) * 1.1 if len(d) else 1.0
    fig.add_trace(
        go.Scatter(x=[0, hi], y=[0, hi], mode="lines", line=dict(color="#888", dash="dot"), showlegend=False),
        row=1,
        col=2,
    )
    t = "Service time = windows × encode + tokens × step + overhead"
    if holdout:
        t = (
            f"Windows × encode + tokens × step: held-back mean {what} within "
            f"{max(1, round(100 * abs(holdout['rel_error'])))} % (n={holdout['n']})"
        )
    fig.update_layout(
        title=t,
        height=560,
        legend=dict(orientation="h", x=0, y=-0.18, xanchor="left", yanchor="top"),
        margin=dict(b=120),
    )
    fig.update_xaxes(title_text=f"{TOKEN_LABELS.get(tok, tok)} (count)", row=1, col=1)
    fig.update_yaxes(title_text=f"measured {what} (s)", row=1, col=1)
    fig.update_xaxes(title_text=f"measured {what} (s)", row=1, col=2)
    fig.update_yaxes(title_text="predicted from measured tokens (s)", row=1, col=2)
    return fig


def fig_rtf(rows: pd.DataFrame) -> go.Figure:
    """Real-time factor vs audio duration: short clips pay the padded 30 s window."""
    d = rows[rows["ok"].astype(bool)]
    fig = go.Figure()
    for (lang, sil), g in d.groupby(["language", "silence"]):
        fig.add_trace(
            go.Scatter(
                x=g["audio_s"],
                y=g["rtf"],
                mode="markers",
                name=f"{_lang_name(lang)}" + (" (with silence)" if sil else ""),
                marker=dict(color=policy_color(lang), size=9, symbol="diamond-open" if sil else "circle"),
            )
        )
    short, long = d[d["audio_s"] < 5]["rtf"], d[d["audio_s"] >= 10]["rtf"]
    t = f"Real-time factor against audio duration (n={len(d)})"
    if len(short) and len(long):
        t = (
            f"Median RTF {short.median():.2f} below 5 s (n={len(short)}) vs {long.median():.2f} "
            f"at 10 s and above (n={len(long)})"
        )
    fig.update_layout(
        title=t,
        xaxis_title="audio duration (s)",
        yaxis_title="real-time factor (processing s / audio s)",
        yaxis_type="log",
    )
    return fig


def fig_vad(summary: pd.DataFrame, metric: str = "tokens_median_ae") -> go.Figure:
    """Median absolute error of the token estimate by duration source, clean clips vs clips with silence."""
    fig = go.Figure()
    if summary.empty:
        return fig
    for sil, g in summary.groupby("silence"):
        fig.add_trace(
            go.Bar(
                x=g["duration_source"],
                y=100 * g[metric],
                name="with inserted silence" if sil else "clean",
                marker_color="#D55E00" if sil else "#0072B2",
                text=[f"{100 * v:.0f} %" for v in g[metric]],
                textposition="outside",
                customdata=g[["cost_ms"]].to_numpy(),
                hovertemplate="%{x}: %{y:.1f} %<br>cost %{customdata[0]:.1f} ms/request",
            )
        )
    s = summary[summary["silence"].astype(bool)].set_index("duration_source")
    t = "Token estimate error by duration source"
    if {"file duration", "silero VAD"} <= set(s.index):
        f, v = s.loc["file duration", metric], s.loc["silero VAD", metric]
        cost = s.loc["silero VAD", "cost_fraction"]
        n = int(s.loc["file duration", "n"]) if "n" in s else 0
        t = (
            f"With silence (n={n} clips), median error: file duration {100 * f:.0f} %, silero VAD {100 * v:.0f} % "
            f"(VAD costs {100 * cost:.1f} % of inference)"
        )
    fig.update_layout(
        title=t,
        barmode="group",
        xaxis_title="size estimate (duration used × κ)",
        yaxis_title="median |estimated / measured tokens − 1| (%)",
    )
    return fig


def fig_batch(batch: pd.DataFrame, model: ServiceModel) -> go.Figure:
    """Decode step time vs number of sequences decoded together, with the fitted slope."""
    fig = go.Figure()
    if batch is None or len(batch) == 0:
        fig.update_layout(title="Batched decode not measured")
        return fig
    cpu = model.fit.get("clock") == "cpu" and "step_cpu_s" in batch
    col = "step_cpu_s" if cpu else "step_s"
    fig.add_trace(
        go.Scatter(
            x=batch["batch"],
            y=1000 * batch[col],
            mode="markers",
            name="measured",
            marker=dict(size=10, color="#0072B2"),
        )
    )
    b = np.arange(1, int(batch["batch"].max()) + 1)
    s1 = float(batch.loc[batch["batch"].idxmin(), col])
    fig.add_trace(
        go.Scatter(
            x=b,
            y=1000 * s1 * (1 + model.decode_batch_slope * (b - 1)),
            mode="lines",
            name=f"1 + {model.decode_batch_slope:.2f}·(b−1)",
            line=dict(color="#000", dash="dash"),
        )
    )
    fig.update_layout(
        title=(
            f"Fitted: each extra sequence adds {100 * model.decode_batch_slope:.0f} % to the decode "
            f"step; batching {int(b[-1])} gives "
            f"{b[-1] / (1 + model.decode_batch_slope * (b[-1] - 1)):.1f}× the token throughput "
            f"({len(batch)} batch sizes timed)"
        ),
        xaxis_title="sequences decoded together (batch size)",
        yaxis_title="decode step CPU time (ms)" if cpu else "decode step time (ms)",
        xaxis=dict(dtick=1),
    )
    return fig


_KAPPA_SERIES = (
    ("tokens_text", "espeak-ng clips: Whisper's text tokens", "circle-open"),
    ("tokens_kept", "espeak-ng clips: + timestamp tokens", "diamond-open"),
    ("decode_steps", "espeak-ng clips: decoder steps", "square-open"),
)


def fig_kappa_text(text_table: pd.DataFrame, profiled: dict | None = None) -> go.Figure:
    """kappa from real transcripts (filled, 95 % CI) beside the profiled kappa of each token definition.

    ``text_table``: :attr:`asrsched.profiling.text_kappa.TextKappa.table`; ``profiled``:
    ``{token column: KappaFit}`` (notebook 01's ``run.kappa_tables``), each with its bootstrap CI.
    """
    fig = go.Figure()
    langs = list(text_table["language"])
    tt = text_table
    fig.add_trace(
        go.Scatter(
            x=[_lang_name(x) for x in tt["language"]],
            y=tt["kappa_text"],
            mode="markers",
            name="real transcripts / real audio (speaker-bootstrap 95 % CI)",
            marker=dict(size=13, color="#000", symbol="circle"),
            error_y=dict(
                type="data",
                symmetric=False,
                array=tt["ci_high"] - tt["kappa_text"],
                arrayminus=tt["kappa_text"] - tt["ci_low"],
                color="#000",
            ),
            customdata=tt[["n", "ols_slope"]].to_numpy(),
            offsetgroup="real",
            hovertemplate="%{x}: %{y:.2f} /s (n=%{customdata[0]}; OLS slope %{customdata[1]:.2f})",
        )
    )
    colors = ("#0072B2", "#009E73", "#D55E00")
    for k, (col, name, sym) in enumerate(_KAPPA_SERIES):
        kf = (profiled or {}).get(col)
        if kf is None:
            continue
        t = kf.table.set_index("language").reindex(langs)
        fig.add_trace(
            go.Scatter(
                x=[_lang_name(x) for x in langs],
                y=t["kappa"],
                mode="markers",
                name=name,
                marker=dict(symbol=sym, size=12, color=colors[k], line=dict(width=2, color=colors[k])),
                error_y=dict(
                    type="data",
                    symmetric=False,
                    array=t["ci_high"] - t["kappa"],
                    arrayminus=t["kappa"] - t["ci_low"],
                    color=colors[k],
                ),
                customdata=t[["n"]].to_numpy(),
                hovertemplate="%{x}: %{y:.2f} /s (n=%{customdata[0]})",
                offsetgroup=str(k),
            )
        )
    parts = ", ".join(
        f"{r.language} {r.kappa_text:.2f} [{r.ci_low:.2f}, {r.ci_high:.2f}] (n={r.n})" for r in tt.itertuples()
    )
    fig.update_layout(
        title=f"Text tokens per second of real audio: {parts}; profiled κ beside it",
        yaxis_title="tokens per second of audio",
        xaxis_title="language",
        scattermode="group",
        legend=dict(orientation="h", x=0, y=-0.2, xanchor="left", yanchor="top"),
        margin=dict(b=150),
        height=560,
    )
    return fig
