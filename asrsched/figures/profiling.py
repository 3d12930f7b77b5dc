"""Figures and the interactive panel of the Whisper profiling notebook (01).

Every builder returns a plotly figure in the house style (:mod:`asrsched.figures.style`)
with a title that states what the data shows and axis titles with units.
Languages take their colours from :func:`language_color` (one hue each, :data:`LANGUAGE_COLORS`).
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
    "LANGUAGE_COLORS",
    "language_color",
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


#: one colour per profiled language (Okabe-Ito), each of its own hue: a language's κ band is a pale tint
#: of its colour, and a tint keeps only the hue (two blues, as the hashed policy colours gave Spanish
#: and Indonesian, read as one language once tinted)
LANGUAGE_COLORS = {"en": "#0072B2", "es": "#D55E00", "de": "#009E73", "id": "#CC79A7"}


def language_color(lang: str) -> str:
    """A language's colour in every profiling figure: :data:`LANGUAGE_COLORS`, else
    :func:`asrsched.figures.style.policy_color`'s stable fallback."""
    return LANGUAGE_COLORS.get(str(lang), policy_color(str(lang)))


def _tint(color: str, alpha: float) -> str:
    """``#rrggbb`` as ``rgba(r, g, b, alpha)``."""
    r, g, b = (int(color.lstrip("#")[i : i + 2], 16) for i in (0, 2, 4))
    return f"rgba({r}, {g}, {b}, {alpha})"


def _lang_name(lang: str) -> str:
    return {"en": "English", "es": "Spanish", "de": "German", "id": "Indonesian"}.get(lang, lang)


def _names(clips, most: int = 3) -> str:
    clips = list(clips)
    return ", ".join(clips[:most]) + (f" and {len(clips) - most} more" if len(clips) > most else "")


def fig_kappa(rows: pd.DataFrame, kfit: KappaFit, *, held: pd.DataFrame | None = None) -> go.Figure:
    """Tokens vs duration per language with the kappa line and its bootstrap CI; residuals below.

    ``rows``: the table ``kfit`` was fitted on (its outliers are found by row label, language,
    duration and tokens: ``KappaFit.outlier_mask``). Each language's
    markers, line and CI band (a tint with edges) share its colour (:func:`language_color`). Clips
    the outlier rule left out are drawn as ``x`` and named beside it (hover: the clip and why); one
    above the axis, which the kept clips set, sits on its edge as a triangle. The title gives each
    κ, the smallest R² and the count of the kept clips; the subtitle the clips left out and the rule.
    A language too thin to fit shows its clips without a line, and the subtitle says why.
    """
    tok, dur = kfit.tokens, kfit.duration
    fig = make_subplots(rows=2, cols=1, shared_xaxes=True, row_heights=[0.72, 0.28], vertical_spacing=0.06)
    d = rows[rows["ok"].astype(bool)] if "ok" in rows else rows
    d = d[np.isfinite(pd.to_numeric(d[dur], errors="coerce")) & np.isfinite(pd.to_numeric(d[tok], errors="coerce"))]
    out = kfit.outlier_mask(d)
    lang = d["language"].astype(str)
    fitted = set(kfit.table["language"])
    shown = d[~out & lang.isin(fitted | set(kfit.skipped))]
    h = held if held is not None and len(held) else d.iloc[:0]
    h = h[h["ok"].astype(bool)] if "ok" in h else h
    xmax = float(d[dur].max()) * 1.05 if len(d) else 1.0
    xs = np.linspace(0, xmax, 50)
    # the kept clips and the CI bands set the axis (a band ends below its kept clips' largest rate x xmax)
    top = 1.08 * max([float(shown[tok].max()) if len(shown) else 1.0, *(kfit.table["ci_high"] * xmax)])
    sf = shown[shown["language"].astype(str).isin(fitted)]
    res = sf[tok] - sf["language"].astype(str).map(kfit.kappa) * sf[dur]
    rlim = 1.15 * float(res.abs().max()) if len(res) and res.abs().max() > 0 else 1.0
    names = d["utt_id"].astype(str) if "utt_id" in d else pd.Series(d.index.astype(str), index=d.index)
    names = names.where(~out, out.index.map(dict(zip(kfit.outliers["row"], kfit.outliers["clip"]))))
    why = dict(zip(kfit.outliers["row"], kfit.outliers["reason"]))
    for r in kfit.table.itertuples():
        c = language_color(r.language)
        g = d[(lang == r.language) & ~out]
        o = d[(lang == r.language) & out]
        k_out = int(getattr(r, "n_outliers", 0))
        lab = f"{_lang_name(r.language)}: κ={r.kappa:.2f} [{r.ci_low:.2f}, {r.ci_high:.2f}] /s, R²={r.r2:.2f}, n={r.n}"
        lab += f", {k_out} left out" if k_out else ""
        ci_hover = f"{_lang_name(r.language)} 95 % CI: κ in [{r.ci_low:.2f}, {r.ci_high:.2f}] /s<extra></extra>"
        fig.add_trace(
            go.Scatter(
                x=np.r_[xs, xs[::-1]],
                y=np.r_[r.ci_high * xs, r.ci_low * xs[::-1]],
                fill="toself",
                fillcolor=_tint(c, 0.18),
                mode="lines",
                line=dict(color=c, width=1, dash="dot"),
                hovertemplate=ci_hover,
                showlegend=False,
                legendgroup=r.language,
                name=f"{_lang_name(r.language)} CI",
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
                name=_lang_name(r.language),
                text=names[g.index],
                hovertemplate="%{text}<br>%{x:.2f} s, %{y} tokens<extra></extra>",
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
                name=_lang_name(r.language),
                text=names[g.index],
                hovertemplate="%{text}<br>%{x:.2f} s, residual %{y:.1f} tokens<extra></extra>",
            ),
            row=2,
            col=1,
        )
        if len(o):
            _outlier_traces(fig, o, names, why, kfit, float(r.kappa), c, top, rlim, r.language)
        hl = h[h["language"].astype(str) == r.language]
        if len(hl):
            hy = hl[tok].to_numpy(float)
            fig.add_trace(
                go.Scatter(
                    x=hl[dur],
                    y=np.where(hy > top, 0.96 * top, hy),
                    cliponaxis=False,
                    mode="markers",
                    showlegend=False,
                    legendgroup=r.language,
                    name=f"{_lang_name(r.language)} held back",
                    marker=dict(
                        color="white",
                        size=9,
                        line=dict(color=c, width=2),
                        symbol=np.where(hy > top, "triangle-up", "circle"),
                    ),
                    customdata=hy,
                    hovertemplate="held back: %{x:.2f} s, %{customdata:.0f} tokens<extra></extra>",
                ),
                row=1,
                col=1,
            )
    for lg in sorted(kfit.skipped):  # its clips without a line; the subtitle says why
        g = d[(lang == lg) & ~out]
        if len(g):
            fig.add_trace(
                go.Scatter(
                    x=g[dur],
                    y=g[tok],
                    mode="markers",
                    marker=dict(color=language_color(lg), size=8, symbol="circle-open"),
                    name=f"{_lang_name(lg)}: not fitted",
                    legendgroup=lg,
                    text=names[g.index],
                    hovertemplate="%{text}<br>%{x:.2f} s, %{y} tokens<extra>" + f"{_lang_name(lg)}: not fitted</extra>",
                ),
                row=1,
                col=1,
            )
        o = d[(lang == lg) & out]
        if len(o):
            _outlier_traces(fig, o, names, why, kfit, None, language_color(lg), top, rlim, lg)
    fig.add_hline(y=0, line=dict(color="#888", dash="dot"), row=2, col=1)
    fig.update_yaxes(range=[0, top], row=1, col=1)
    fig.update_yaxes(range=[-rlim, rlim], row=2, col=1)
    t = kfit.table
    ks = ", ".join(f"{r.language} {r.kappa:.1f}" for r in t.itertuples())
    r2 = t["r2"].min() if len(t) else float("nan")
    n = int(t["n"].sum()) if len(t) else 0
    sub = _kappa_subtitle(kfit)
    fig.update_layout(
        title=f"{TOKEN_LABELS.get(tok, tok).capitalize()} against duration: κ = {ks} per s "
        f"(line through the origin, R² ≥ {r2:.2f}, n={n} clips kept)<br><sup>{sub}</sup>",
        legend=dict(orientation="h", x=0, y=-0.24, xanchor="left", yanchor="top"),
        margin=dict(b=170),
        height=660,
    )
    fig.update_xaxes(title_text=f"{DURATION_LABELS.get(dur, dur)} (s)", row=2, col=1)
    fig.update_yaxes(title_text=f"{TOKEN_LABELS.get(tok, tok)} (count)", row=1, col=1)
    fig.update_yaxes(title_text="residual (tokens)", row=2, col=1)
    return fig


def _kappa_subtitle(kfit: KappaFit) -> str:
    """The clips left out (how many, which), the rule, and the languages not fitted."""
    o = kfit.outliers
    parts = []
    if len(o):
        per = "; ".join(f"{lg}: {_names(g['clip'])}" for lg, g in o.groupby("language", sort=True))
        parts.append(
            f"{len(o)} clip{'s' if len(o) > 1 else ''} left out of the fit, marked × (▲ beyond the axis): {per}"
        )
    elif kfit.rule and not kfit.rule.startswith("no outlier rule"):
        parts.append("no clip left out")
    if kfit.rule:
        parts.append(kfit.rule)
    parts += [f"{lg} not fitted: {why}" for lg, why in sorted(kfit.skipped.items())]
    return "; ".join(parts)


def _outlier_traces(fig, o, names, why, kfit, kappa, c, top, rlim, language) -> None:
    """The clips left out: ``x`` at their place, a triangle on the edge when beyond it; the residual panel
    too when the language has a ``kappa``."""
    tok, dur = kfit.tokens, kfit.duration
    y = o[tok].to_numpy(float)
    info = np.c_[names[o.index].to_numpy(object), o[tok].to_numpy(float), [why.get(i, "") for i in o.index]]
    panels = [(1, y, 0.0, top)]
    if kappa is not None:
        panels.append((2, y - kappa * o[dur].to_numpy(float), -rlim, rlim))
    for row, val, lo, hi in panels:
        beyond = (val > hi) | (val < lo)
        fig.add_trace(
            go.Scatter(
                x=o[dur],
                y=np.where(val > hi, 0.96 * hi, np.where(val < lo, lo + 0.04 * (hi - lo), val)),
                cliponaxis=False,
                mode="markers+text" if row == 1 else "markers",
                marker=dict(
                    color=c,
                    size=12,
                    symbol=np.where(beyond, np.where(val > hi, "triangle-up", "triangle-down"), "x"),
                    line=dict(color="white", width=1),
                ),
                text=names[o.index] if row == 1 else None,
                textposition="middle right",
                textfont=dict(color=c),
                customdata=info,
                showlegend=False,
                legendgroup=language,
                name=f"{_lang_name(language)} left out",
                hovertemplate="left out: %{customdata[0]}<br>%{x:.2f} s, %{customdata[1]:.0f} tokens"
                "<br>%{customdata[2]}<extra></extra>",
            ),
            row=row,
            col=1,
        )


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
        c = language_color(lang)
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
                marker=dict(color=language_color(lang), size=9, symbol="diamond-open" if sil else "circle"),
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
        margin=dict(b=170),
        height=560,
    )
    return fig
