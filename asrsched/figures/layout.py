"""One layout pass for every figure: text that fits, and a check that it does.

:func:`apply_layout` is what :func:`asrsched.figures.style.export_figure` (and the explorers, on every
redraw) run on a figure before it is drawn at a known size:

* **titles wrap** inside the figure (:func:`fit_title`), and the top margin grows with them;
* **axis titles get their own space**: a title longer than its axis is wrapped onto two or more
  lines, and plotly's ``automargin`` (house template) reserves the room;
* **subplots don't collide**: columns of a subplot grid are moved apart when a y axis inside the
  grid carries tick labels or a title (the 06 figures drew them over the panel to the left), rows
  when an x axis title or a subplot title sits between them;
* **category ticks wrap** instead of rotating into the next panel;
* **log axes** get 1-2-5 ticks written as full numbers (0.5, 1, 2, 5, 10, 20, …) instead of
  plotly's "5 1 2 5 10 2", where 0.5 and 5 look alike.

Widths are estimated from the house font (DejaVu Sans: a mean glyph of about 0.55 em);
:mod:`asrsched.figures.layout_check` measures the real drawing in a browser.
"""

from __future__ import annotations

import math
import re
import textwrap

import numpy as np
import plotly.graph_objects as go

__all__ = [
    "CHAR_EM",
    "text_width",
    "fit_title",
    "wrap_text",
    "log_ticks",
    "apply_log_ticks",
    "space_subplots",
    "wrap_category_ticks",
    "fit_axis_titles",
    "apply_layout",
    "live_layout",
    "TABLE_CSS",
]

CHAR_EM = 0.55  # mean glyph width of DejaVu Sans in em, with a little slack (measured ≈ 0.49–0.53 on titles)
_TITLE_CHAR_EM = 0.52  # the same for titles (bold-free, mostly lower case)
BASE_FONT, TITLE_FONT = 15, 18
_DEFAULT_MARGIN = dict(l=70, r=30, t=70, b=60)

# Widget tables (ipywidgets HTML) clip their text by default; these rules make wide tables scroll
# and let headers wrap. Shown once per explorer (asrsched.figures.panel.export_view_button).
TABLE_CSS = (
    "<style>.widget-html-content{white-space:normal;overflow:visible}"
    ".widget-html-content table{display:block;max-width:100%;overflow-x:auto;border-collapse:collapse}"
    ".widget-html-content th,.widget-html-content td{padding:2px 8px;white-space:nowrap}"
    ".widget-html-content th{white-space:normal;vertical-align:bottom}</style>"
)


def _plain(text: str) -> str:
    return re.sub(r"<[^>]+>", "", str(text))


def text_width(text: str, size: float = BASE_FONT, em: float = CHAR_EM) -> float:
    """Estimated width in px of the longest line of ``text`` (``<br>`` breaks lines, tags ignored)."""
    lines = re.split(r"<br\s*/?>", str(text))
    return max(len(_plain(s)) for s in lines) * em * size if lines else 0.0


def wrap_text(text: str, max_chars: int) -> list[str]:
    """``text`` in as few lines of at most ``max_chars`` as possible, balanced (no one-word orphan)."""
    max_chars = max(8, int(max_chars))
    if len(text) <= max_chars:
        return [text]
    n = len(textwrap.wrap(text, max_chars, break_long_words=False, break_on_hyphens=False))
    lines = textwrap.wrap(text, max_chars, break_long_words=False, break_on_hyphens=False)
    for chars in range(-(-len(text) // n), max_chars + 1):
        trial = textwrap.wrap(text, chars, break_long_words=False, break_on_hyphens=False)
        if len(trial) <= n:
            lines = trial
            break
    return lines


def _margin(fig: go.Figure, side: str) -> float:
    m = fig.layout.margin
    v = getattr(m, side) if m is not None else None
    return float(v) if v is not None else float(_DEFAULT_MARGIN[side])


_TAGGED = re.compile(r"<(sup|sub|i|b|em|span)(\s[^>]*)?>(.*)</\1>", re.S)


def _wrap_segment(seg: str, size: float, width: int) -> list[tuple[str, float]]:
    """One ``<br>``-separated piece of a title as wrapped lines ``(html, font px)``.

    Plain text wraps; a piece wrapped whole in one tag (``<sup>…</sup>``) wraps inside it; other
    markup is left as it is.
    """
    m = _TAGGED.fullmatch(seg.strip())
    if m:
        tag, attrs, inner = m.group(1), m.group(2) or "", m.group(3)
        if "<" in inner:
            return [(seg, size)]
        fs = size * (0.7 if tag in ("sup", "sub") else 1.0)
        opening, closing = f"<{tag}{attrs}>", f"</{tag}>"
    elif "<" in seg:
        return [(seg, size)]
    else:
        inner, fs, opening, closing = seg, size, "", ""
    max_chars = max(20, int(width * 0.95 / (_TITLE_CHAR_EM * fs)))
    return [(opening + line + closing, fs) for line in wrap_text(inner.strip(), max_chars)]


def fit_title(fig: go.Figure, width: int = 900, top: float | None = None) -> go.Figure:
    """Wrap a title too long for ``width`` px onto several lines (in place) and make room for it.

    Titles state findings and get long; plotly never wraps them, so at print width they would run
    off the page. Each ``<br>`` piece wraps on its own (a ``<sup>…</sup>`` subtitle inside its
    tag); the title is then anchored to the top of the figure and the top margin grows with it,
    clear of subplot titles. ``top``: the top margin for a one-line title (default: the figure's
    own, else the house 70 px). A title that fits on one line is left alone.
    """
    title = fig.layout.title
    text = title.text if title is not None else None
    if not text:
        return fig
    size = (title.font.size if title.font and title.font.size else None) or TITLE_FONT
    segs = re.split(r"<br\s*/?>", text)
    lines = [ln for seg in segs for ln in _wrap_segment(seg, size, width)]
    if len(lines) == 1:
        return fig
    meta = dict(fig.layout.meta) if isinstance(fig.layout.meta, dict) else {}
    if top is None:  # the margin before any earlier pass grew it (a re-export is laid out again)
        top = meta.get("asrsched_top")
    if top is None:
        top = fig.layout.margin.t if fig.layout.margin and fig.layout.margin.t is not None else _DEFAULT_MARGIN["t"]
    if isinstance(fig.layout.meta, dict) or fig.layout.meta is None:
        fig.layout.meta = {**meta, "asrsched_top": top}
    block = 22 + sum(fs * 1.3 for _, fs in lines)
    sub_titles = any(a.yref == "paper" and a.y is not None and float(a.y) >= 0.99 for a in fig.layout.annotations)
    need = max(top + (len(lines) - 1) * size * 1.3, block + (BASE_FONT * 1.6 if sub_titles else 0) + 10)
    # anchor the block to the top of the figure, so extra lines grow downwards into the added margin
    # instead of onto subplot titles
    fig.update_layout(
        title=dict(text="<br>".join(h for h, _ in lines), yref="container", y=1, yanchor="top", pad=dict(t=22)),
        margin_t=need,
    )
    return fig


# ------------------------------------------------------------------------------------------ axes
def _axes(fig: go.Figure, letter: str) -> list[tuple[str, object]]:
    """``[("xaxis", obj), ("xaxis2", obj), ...]`` for the axes the figure's traces use or it defines."""
    names = {f"{letter}axis"}
    for tr in fig.data:
        ref = getattr(tr, f"{letter}axis", None)
        if ref:
            names.add(f"{letter}axis{ref[1:]}")
    names |= {k for k in fig.layout.to_plotly_json() if re.fullmatch(rf"{letter}axis\d*", k)}
    return sorted(((n, fig.layout[n]) for n in names), key=lambda kv: int(kv[0][5:] or 1))


def _traces_on(fig: go.Figure, axis_name: str) -> list:
    """The traces drawn against layout axis ``axis_name`` (``"xaxis"``, ``"yaxis2"``, ...)."""
    letter = axis_name[0]
    ref = letter + axis_name[5:]
    return [tr for tr in fig.data if (getattr(tr, f"{letter}axis", None) or letter) == ref]


def _fmt_tick(v: float) -> str:
    if v == 0:
        return "0"
    if 1e-4 <= abs(v) < 1e7:
        s = f"{v:.6f}".rstrip("0").rstrip(".") if abs(v) < 1 else f"{v:.0f}" if v == int(v) else f"{v:g}"
        return s
    return f"{v:.0e}".replace("e+0", "e").replace("e-0", "e-")


def log_ticks(lo: float, hi: float) -> tuple[list[float], list[str]]:
    """Tick values and labels for a log axis over ``[lo, hi]`` (data units, both > 0).

    1-2-5 per decade up to three decades, 1-3 up to six, powers of ten beyond; labels are full
    numbers: ``0.5, 1, 2, 5, 10``.
    """
    if not (lo > 0 and hi > 0) or not (math.isfinite(lo) and math.isfinite(hi)):
        raise ValueError(f"log axis range must be positive and finite, got [{lo}, {hi}]")
    lo, hi = min(lo, hi), max(lo, hi)
    decades = math.log10(hi) - math.log10(lo)
    mant = (1, 2, 5) if decades <= 3.2 else (1, 3) if decades <= 6 else (1,)
    vals = []
    for e in range(math.floor(math.log10(lo)) - 1, math.ceil(math.log10(hi)) + 1):
        for m in mant:
            v = m * 10.0**e
            if lo * 0.999 <= v <= hi * 1.001:
                vals.append(float(f"{v:.12g}"))
    if len(vals) < 2:  # less than one step inside: add the neighbours around the data
        e = math.floor(math.log10(lo))
        vals = sorted(
            {float(f"{m * 10.0**k:.12g}") for k in (e, e + 1) for m in (1, 2, 5) if lo / 3 <= m * 10.0**k <= hi * 3}
        )
    return vals, [_fmt_tick(v) for v in vals]


def _positive(values) -> np.ndarray:
    if values is None:
        return np.array([])
    try:
        a = np.asarray(values, dtype=float).ravel()
    except (TypeError, ValueError):
        return np.array([])
    return a[np.isfinite(a) & (a > 0)]


def _extent(tr, letter: str) -> np.ndarray:
    """A trace's positive values on one axis, with the ends of its error bars (``type="data"``)."""
    vals = _positive(getattr(tr, letter, None))
    err = getattr(tr, f"error_{letter}", None)
    if err is None or err.visible is False or err.array is None or (err.type or "data") != "data":
        return vals
    v = np.asarray(getattr(tr, letter), dtype=float).ravel()
    plus = np.resize(np.asarray(err.array, dtype=float), len(v))
    symmetric = err.symmetric if err.symmetric is not None else err.arrayminus is None  # plotly's default
    minus = plus if symmetric else np.resize(np.asarray(err.arrayminus, dtype=float), len(v))
    return np.concatenate([vals, _positive(v + plus), _positive(v - minus)])


def apply_log_ticks(fig: go.Figure) -> go.Figure:
    """Give every log axis without explicit ticks 1-2-5 ticks with full-number labels (in place).

    The range is the axis's own ``range`` (log10 units) if set, else the data of its traces with
    their error bars. When the data span less than one 1-2-5 step, so that one tick label or none
    would be drawn, the axis range is widened to the ticks just below and above the data: a log
    axis always shows at least two labels (the figure check fails on a single one). Axes whose
    ticks or range this function set before are recomputed (a redrawn explorer).
    """
    meta = dict(fig.layout.meta) if isinstance(fig.layout.meta, dict) else {}
    mine = set(meta.get("asrsched_log_ticks", []))
    widened = set(meta.get("asrsched_log_range", []))
    done, wide = [], []
    for letter in ("x", "y"):
        for name, ax in _axes(fig, letter):
            if ax.type != "log" or (ax.tickvals is not None and name not in mine):
                continue
            fixed = ax.range is not None and None not in tuple(ax.range) and name not in widened
            if fixed:
                lo, hi = 10 ** float(ax.range[0]), 10 ** float(ax.range[1])
            else:
                vals = np.concatenate([_extent(tr, letter) for tr in _traces_on(fig, name)] or [np.array([])])
                if not len(vals):
                    continue
                lo, hi = float(vals.min()), float(vals.max())
            tv, tt = log_ticks(lo, hi)
            ax.update(tickmode="array", tickvals=tv, ticktext=tt)
            done.append(name)
            inside = [v for v in tv if lo * 0.999 <= v <= hi * 1.001]
            if not fixed and len(inside) < 2:
                below = max([v for v in tv if v <= lo] or [lo])
                above = min([v for v in tv if v >= hi] or [hi])
                a, b = math.log10(below), math.log10(above)
                pad = 0.04 * (b - a or 1.0)
                ax.update(range=[a - pad, b + pad], autorange=False)
                wide.append(name)
            elif name in widened:
                ax.update(range=None, autorange=True)
    if done or mine:
        meta["asrsched_log_ticks"] = sorted(set(done))
        meta["asrsched_log_range"] = sorted(set(wide))
        fig.layout.meta = meta
    return fig


def _domain(ax, default=(0.0, 1.0)) -> tuple[float, float]:
    d = ax.domain if ax is not None and ax.domain is not None else default
    return float(d[0]), float(d[1])


def _font(ax, default=BASE_FONT) -> float:
    try:
        return float(ax.tickfont.size or default)
    except AttributeError:
        return default


def fit_axis_titles(fig: go.Figure, width: int, height: int) -> go.Figure:
    """Wrap an axis title longer than its axis onto several lines (in place)."""
    pw = width - _margin(fig, "l") - _margin(fig, "r")
    ph = height - _margin(fig, "t") - _margin(fig, "b")
    for letter, span_px in (("x", pw), ("y", ph)):
        for _name, ax in _axes(fig, letter):
            t = ax.title.text if ax.title is not None else None
            if not t or "<br" in t:
                continue
            a, b = _domain(ax)
            size = (ax.title.font.size if ax.title.font and ax.title.font.size else None) or BASE_FONT
            room = max(60.0, (b - a) * span_px * 0.95)
            if text_width(t, size) > room:
                ax.title.text = "<br>".join(wrap_text(_plain(t), int(room / (CHAR_EM * size))))
    return fig


def _categories(fig: go.Figure, name: str) -> list[str]:
    cats: list[str] = []
    for tr in _traces_on(fig, name):
        xs = getattr(tr, "x", None)
        if xs is None and tr.type in ("box", "violin") and tr.name is not None and getattr(tr, "y", None) is not None:
            xs = [tr.name]
        if xs is None:
            continue
        for v in xs:
            if isinstance(v, str) and v not in cats:
                cats.append(v)
    return cats


def wrap_category_ticks(fig: go.Figure, width: int) -> go.Figure:
    """Wrap long category labels of x axes onto lines that fit their slot, horizontal (in place)."""
    pw = width - _margin(fig, "l") - _margin(fig, "r")
    for name, ax in _axes(fig, "x"):
        if ax.tickvals is not None or ax.type not in (None, "-", "category") or ax.tickangle not in (None, 0):
            continue  # explicit ticks, a numeric axis, or labels the figure already slants
        cats = _categories(fig, name)
        if not cats:
            continue
        a, b = _domain(ax)
        slot = (b - a) * pw / len(cats)
        size = _font(ax)
        if max(text_width(c, size) for c in cats) <= slot * 0.9:
            continue
        chars = max(4, int(slot * 0.9 / (CHAR_EM * size)))
        text = ["<br>".join(wrap_text(c, chars)) for c in cats]
        ax.update(tickmode="array", tickvals=cats, ticktext=text, tickangle=0)
        widest = max(text_width(t, size) for t in text)  # a word longer than the slot: smaller font
        if widest > slot * 0.9:
            small = size * slot * 0.8 / widest  # 0.8: the width estimate runs a little short of the render
            if small >= 9:
                ax.tickfont.size = math.floor(small)
            else:  # still too wide at the smallest legible size: slant the original labels instead,
                # as little as lets each label's bounding box fit its slot
                w = 1.25 * max(text_width(c, size) for c in cats)  # the estimate runs short of the render
                lines = max(len(re.split(r"<br\s*/?>", c)) for c in cats)  # a label of two lines is twice as tall
                h = 1.3 * size * lines
                angle = next(
                    (
                        a
                        for a in (30, 45, 60, 75, 90)
                        if w * math.cos(math.radians(a)) + h * math.sin(math.radians(a)) <= slot * 0.9
                    ),
                    90,
                )
                ax.update(tickmode="auto", tickvals=None, ticktext=None, tickangle=-angle, automargin=True)
    return fig


def _y_label_px(fig: go.Figure, ax) -> float:
    """Room a y axis needs to its left: tick labels (estimated from the data) and its title."""
    if ax.showticklabels is False:
        return 12.0
    size = _font(ax)
    if ax.ticktext is not None:
        chars = max((len(_plain(t)) for t in ax.ticktext), default=4)
    else:
        chars = 6
    px = chars * CHAR_EM * size + 12
    if ax.title is not None and ax.title.text:
        px += size * 1.4 * (1 + str(ax.title.text).count("<br")) + 6
    return px


def _relayout(doms: list[tuple[float, float]], gaps_needed: list[float]) -> list[tuple[float, float]] | None:
    """New domains for panels in a line keeping their proportions, with at least ``gaps_needed``
    (paper units) between neighbours; ``None`` when nothing needs to move."""
    gaps = [doms[i + 1][0] - doms[i][1] for i in range(len(doms) - 1)]
    if all(g >= need - 1e-9 for g, need in zip(gaps, gaps_needed, strict=True)):
        return None
    new_gaps = [max(g, need) for g, need in zip(gaps, gaps_needed, strict=True)]
    start, end = doms[0][0], doms[-1][1]
    widths = [b - a for a, b in doms]
    scale = (end - start - sum(new_gaps)) / sum(widths)
    if scale <= 0.3:  # would squash the panels: leave it to the check to report
        scale = max(scale, 0.3)
    out, x = [], start
    for i, w in enumerate(widths):
        out.append((x, x + w * scale))
        x += w * scale + (new_gaps[i] if i < len(new_gaps) else 0)
    return out


def space_subplots(fig: go.Figure, width: int, height: int) -> go.Figure:
    """Move the columns (and rows) of a subplot grid apart where labels would collide (in place).

    Subplot-title annotations (``make_subplots(subplot_titles=...)``) move with their panel.
    """
    pw = width - _margin(fig, "l") - _margin(fig, "r")
    ph = height - _margin(fig, "t") - _margin(fig, "b")
    xaxes = dict(_axes(fig, "x"))
    yaxes = dict(_axes(fig, "y"))
    if len(xaxes) < 2:
        return fig
    moves: dict[tuple[float, float], tuple[float, float]] = {}
    # columns: distinct x domains, and the y axes anchored to each
    cols = sorted({_domain(ax) for ax in xaxes.values()})
    if len(cols) > 1 and all(cols[i][1] <= cols[i + 1][0] + 1e-9 for i in range(len(cols) - 1)):
        need = []
        for c in cols[1:]:
            px = 0.0
            for yax in yaxes.values():
                anchor = yax.anchor or "x"
                xname = "xaxis" + anchor[1:]
                if xname in xaxes and _domain(xaxes[xname]) == c:
                    px = max(px, _y_label_px(fig, yax))
            need.append((px + 10) / pw)
        new = _relayout(cols, need)
        if new:
            for old, nw in zip(cols, new, strict=True):
                moves[old] = nw
            for ax in xaxes.values():
                d = _domain(ax)
                if d in moves:
                    ax.domain = list(moves[d])
    # rows: distinct y domains, x axis labels of the panel below... and titles above
    rows = sorted({_domain(ax) for ax in yaxes.values()})
    vmoves: dict[tuple[float, float], tuple[float, float]] = {}
    if len(rows) > 1 and all(rows[i][1] <= rows[i + 1][0] + 1e-9 for i in range(len(rows) - 1)):
        titled = [a for a in fig.layout.annotations if a.xref == "paper" and a.yref == "paper" and a.text]
        need = []
        for lower, upper in zip(rows[:-1], rows[1:], strict=True):
            px = 8.0
            for xax in xaxes.values():
                anchor = xax.anchor or "y"
                yname = "yaxis" + anchor[1:]
                if yname in yaxes and _domain(yaxes[yname]) == upper:
                    if xax.showticklabels is not False:
                        px = max(
                            px,
                            8
                            + _font(xax)
                            * 1.3
                            * (1 + max((str(t).count("<br") for t in (xax.ticktext or [])), default=0))
                            + 6,
                        )
                    if xax.title is not None and xax.title.text:
                        px = max(px, 8 + _font(xax) * 1.3 + 6 + BASE_FONT * 1.4)
            if any(abs(float(a.y) - lower[1]) < 0.02 for a in titled if a.y is not None):
                px += BASE_FONT * 1.5
            need.append(px / ph)
        new = _relayout(rows, need)
        if new:
            vmoves = dict(zip(rows, new, strict=True))
            for ax in yaxes.values():
                d = _domain(ax)
                if d in vmoves:
                    ax.domain = list(vmoves[d])
    # subplot titles sit at the centre-top of their panel: move them along
    for a in fig.layout.annotations:
        if a.xref != "paper" or a.yref != "paper" or a.x is None or a.y is None:
            continue
        for old, nw in moves.items():
            if abs(float(a.x) - (old[0] + old[1]) / 2) < 1e-6:
                a.x = (nw[0] + nw[1]) / 2
                break
        for old, nw in vmoves.items():
            if abs(float(a.y) - old[1]) < 1e-6:
                a.y = nw[1]
                break
    return fig


def apply_layout(fig: go.Figure, width: int = 900, height: int = 560) -> go.Figure:
    """The whole layout pass for a figure drawn at ``width`` x ``height`` px (in place; returns it)."""
    fit_title(fig, width)
    wrap_category_ticks(fig, width)
    apply_log_ticks(fig)
    fit_axis_titles(fig, width, height)
    space_subplots(fig, width, height)
    return fig


def live_layout(fig: go.Figure, width: int = 900) -> go.Figure:
    """Keep an explorer's ``FigureWidget`` laid out as its view changes (returns it).

    Each time the title changes (every explorer redraw sets one), the title is wrapped to ``width``
    px from the explorer's own top margin, and category and log ticks are recomputed for the new
    data. Plain figures are returned unchanged.
    """
    if not hasattr(fig, "_widget_layout") or getattr(fig, "_asrsched_live_layout", False):
        return fig
    base_t = _margin(fig, "t")
    state = {"busy": False, "ours": None}

    def relayout(*_):
        if state["busy"]:
            return
        text = fig.layout.title.text if fig.layout.title is not None else None
        if text is not None and text == state["ours"]:
            return  # the title this pass set last time
        state["busy"] = True
        try:
            probe = go.Figure(
                layout=dict(title=dict(text=text), margin=dict(t=base_t), annotations=list(fig.layout.annotations))
            )
            fit_title(probe, width, top=base_t)  # on a copy: values read inside a batch are stale
            with fig.batch_update():
                if probe.layout.title.text != text:
                    fig.layout.title.update(probe.layout.title)
                fig.layout.margin.t = probe.layout.margin.t
                wrap_category_ticks(fig, width)
                apply_log_ticks(fig)
            state["ours"] = fig.layout.title.text if fig.layout.title is not None else None
        finally:
            state["busy"] = False

    def on_message(change):
        msg = change.get("new") or {}
        data = msg.get("layout_data") or msg.get("relayout_data") or {}
        if any(str(k).split(".")[0] == "title" for k in data):
            relayout()

    # python-side edits reach the browser as these messages (plotly's on_change does not fire for them)
    fig.observe(on_message, names=["_py2js_update", "_py2js_relayout"])
    fig._asrsched_live_layout = True
    relayout()
    return fig
