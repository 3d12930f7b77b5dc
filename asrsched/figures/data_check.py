"""The figure check's data rules: a figure must not hide data it clips, nor show an impossible interval.

:func:`data_problems` reads a figure as plain JSON (``fig.to_plotly_json()``, or what
:func:`asrsched.figures.reexport.html_figure_parts` reads back from an HTML export) and lists:

* **clipped data without a marker** -- a point (or an error bar's end) outside an axis whose range the
  figure fixed, unless the point says its value on the figure (a ``text`` label at that point, as
  :func:`asrsched.figures.ab_asr.fig_tail` writes on a bar cut at its axis);
* **a relative change below -100 %** -- on an axis titled as a change in % (``change vs FCFS (%)``), a
  value or the low end of its interval below -100 %: a latency (or any positive quantity) cannot
  fall by more than all of it, so such an interval is a symmetric interval misapplied to a ratio
  (:func:`asrsched.sim.sweep_report.change_ci` gives ratio intervals).

:func:`tick_problems` takes the tick labels the browser drew (the layout check measures them) and
reports a numeric axis with fewer than two labels: its scale cannot be read.
``asrsched check-figures`` runs all of these with the text checks of
:mod:`asrsched.figures.layout_check`.
"""

from __future__ import annotations

import base64
import math
import re
from collections.abc import Iterable

import numpy as np

__all__ = ["data_problems", "tick_problems", "is_change_axis", "decode_array"]

#: an axis title that states a relative change in percent
_CHANGE_TITLE = re.compile(r"change[^%]*\(%\)|%\s*change", re.I)
_TAGS = re.compile(r"<[^>]+>")
_TOL = 1e-9


def decode_array(v) -> np.ndarray | None:
    """A trace's array as numbers (plotly's JSON: a list, or ``{"dtype", "bdata"[, "shape"]}``); ``None``
    for categories or anything else that is not numeric."""
    if v is None:
        return None
    if isinstance(v, dict) and "bdata" in v:
        a = np.frombuffer(base64.b64decode(v["bdata"]), dtype=np.dtype(v.get("dtype", "f8")))
        if "shape" in v:
            a = a.reshape([int(s) for s in str(v["shape"]).split(",")])
        return a.astype(float).ravel()
    if isinstance(v, (list, tuple, np.ndarray)):
        try:
            a = np.asarray(v, dtype=float).ravel()
        except (TypeError, ValueError):
            return None
        return a
    return None


def _axis_key(ref: str | None, letter: str) -> str:
    """``"x2"`` -> ``"xaxis2"``; a trace without ``xaxis``/``yaxis`` sits on the first axis."""
    ref = ref or letter
    return f"{letter}axis{ref[1:]}"


def _title_text(ax: dict) -> str:
    t = ax.get("title")
    if isinstance(t, dict):
        t = t.get("text")
    return _TAGS.sub(" ", str(t or ""))


def is_change_axis(ax: dict) -> bool:
    """Whether an axis (a layout dict) is titled as a relative change in percent."""
    return bool(_CHANGE_TITLE.search(_title_text(ax)))


def _fixed_range(ax: dict) -> tuple[float, float] | None:
    """The axis range the figure fixed, in data units (log axes store log10), or ``None`` if autoranged."""
    rng = ax.get("range")
    if not rng or ax.get("autorange") in (True, "reversed") or any(r is None for r in rng):
        return None
    try:
        lo, hi = sorted(float(r) for r in rng)
    except (TypeError, ValueError):  # a date or category range
        return None
    if ax.get("type") == "log":
        lo, hi = 10.0**lo, 10.0**hi
    return lo, hi


def _labels(trace: dict, n: int) -> list[str]:
    """The text written at each point of a trace (empty where none is shown: a scatter shows its
    ``text`` only in a ``mode`` with ``text``; any trace hides it with ``textposition="none"``)."""
    kind = trace.get("type", "scatter")
    if trace.get("textposition") == "none" or (
        kind in ("scatter", "scattergl") and "text" not in (trace.get("mode") or "")
    ):
        return [""] * n
    t = trace.get("text")
    if t is None:
        t = trace.get("texttemplate")
    if isinstance(t, str):
        return [t] * n
    if isinstance(t, (list, tuple)):
        return [str(s or "") for s in t] + [""] * max(0, n - len(t))
    return [""] * n


def _error_ends(trace: dict, letter: str, values: np.ndarray) -> tuple[np.ndarray, np.ndarray] | None:
    err = trace.get(f"error_{letter}")
    if not isinstance(err, dict) or err.get("visible") is False or err.get("type", "data") != "data":
        return None
    plus = decode_array(err.get("array"))
    if plus is None:
        return None
    # plotly's default: symmetric unless an ``arrayminus`` is given
    symmetric = err.get("symmetric") if err.get("symmetric") is not None else err.get("arrayminus") is None
    minus = plus if symmetric else decode_array(err.get("arrayminus"))
    if minus is None:
        minus = plus
    n = len(values)
    plus = np.resize(plus, n) if len(plus) else np.zeros(n)
    minus = np.resize(minus, n) if len(minus) else np.zeros(n)
    return values - np.nan_to_num(minus), values + np.nan_to_num(plus)


def _name(trace: dict, i: int) -> str:
    return str(trace.get("name") or f"trace {i}")


def data_problems(data: Iterable[dict], layout: dict) -> list[str]:
    """The data rules (module docstring) on one figure given as plain JSON ``data`` and ``layout``."""
    out: list[str] = []
    for i, tr in enumerate(data):
        if tr.get("visible") in (False, "legendonly"):
            continue
        kind = tr.get("type", "scatter")
        if kind not in ("scatter", "scattergl", "bar", "box", "violin"):
            continue
        for letter in ("x", "y"):
            values = decode_array(tr.get(letter))
            if values is None or not len(values):
                continue
            ax = layout.get(_axis_key(tr.get(f"{letter}axis"), letter), {}) or {}
            if ax.get(
                "matches"
            ):  # a shared axis (make_subplots(shared_yaxes=True)) takes the range of the one it matches
                ax = {**(layout.get(_axis_key(ax["matches"], letter), {}) or {}), "title": ax.get("title")}
            ends = _error_ends(tr, letter, values)
            if is_change_axis(ax):
                low = values if ends is None else np.fmin(values, ends[0])
                below = np.flatnonzero(low < -100.0 - _TOL)
                if len(below):
                    j = int(below[0])
                    what = "interval reaches" if ends is not None and ends[0][j] < values[j] else "value is"
                    out.append(
                        f"{_name(tr, i)}: a relative change {what} {low[j]:.1f} % on '{_title_text(ax).strip()}' "
                        f"({len(below)} point(s) below -100 %, which no positive quantity can fall)"
                    )
            rng = _fixed_range(ax)
            if rng is None:
                continue
            lo, hi = rng
            span = hi - lo
            slack = 1e-6 * (abs(span) or 1.0)
            labels = _labels(tr, len(values))
            cut = []
            for j, v in enumerate(values):
                e_lo, e_hi = (ends[0][j], ends[1][j]) if ends is not None else (v, v)
                bad = [w for w in (v, e_lo, e_hi) if math.isfinite(w) and (w < lo - slack or w > hi + slack)]
                if bad and not labels[j].strip():
                    cut.append((j, bad[0]))
            if cut:
                j, w = cut[0]
                out.append(
                    f"{_name(tr, i)}: {len(cut)} point(s) or interval end(s) outside the fixed {letter} range "
                    f"[{lo:g}, {hi:g}] with no label saying the value (first: point {j}, {w:g})"
                )
    return out


def _number(label: str) -> float | None:
    s = label.replace("\u2212", "-").replace(",", "").replace("\u2009", "").strip()
    s = re.sub(r"[%×x s]+$", "", s)
    m = re.fullmatch(r"[-+]?\d*\.?\d+(e[-+]?\d+)?[kMGµmun]?", s, re.I)
    return float(re.sub(r"[kMGµmun]$", "", s)) if m else None


def tick_problems(tick_labels: dict[str, list[str]]) -> list[str]:
    """Numeric axes with fewer than two tick labels; ``tick_labels`` maps an axis (``"x"``, ``"y2"``) to
    the labels the browser drew on it."""
    out = []
    for axis, labels in sorted(tick_labels.items()):
        nums = [_number(t) for t in labels if t.strip()]
        if nums and all(v is not None for v in nums) and len(set(nums)) < 2:
            out.append(
                f"axis {axis} has a single tick label ({labels[0]!r}): its scale cannot be read "
                "(widen the range or set the ticks)"
            )
    return out
