"""The container every explorer returns: a live panel that also survives a saved or batch-executed notebook.

:class:`Panel` is an ``ipywidgets.VBox`` (the explorer's rows of controls, its plotly ``FigureWidget``
and tables) ending with the "export this view" button (:func:`export_view_button`,
fed by :func:`control_state`). When the panel is shown it adds two things a live view alone lacks:

* its display carries, beside the widget view, an ``image/png`` of the figure as first computed
  (rendered by :func:`static_png` through :func:`asrsched.figures.style.export_figure`, the house
  export path) and a one-line ``text/plain`` saying what the panel is. JupyterLab draws an untrusted
  notebook's output (a copy written by ``asrsched run``, papermill or nbclient) with the best *safe*
  mime type, which is the PNG, not the widget view: a plot, not ``VBox(children=...)`` as text.
  Without Chromium (or kaleido) the text says why there is no image; the cell never fails;
* it sends the figure's state once (:func:`send_figure_state`): plotly sends a ``FigureWidget``'s
  edits as one-off messages, so the widget state nbclient saves in ``metadata.widgets`` held an empty
  figure, and a trusted copy restored the panel without its plot.

The figure itself is an :class:`ExplorerFigure`: a ``FigureWidget`` whose messages carry arrays as JSON
lists. plotly sends numeric numpy arrays as binary buffers, and nbclient keeps every buffer a widget
ever sent, also those of one-off messages (``_py2js_addTraces``) whose value is ``None`` when saved;
JupyterLab's restore of a trusted notebook then fails on the first such buffer, and with it every widget
of the notebook ("Loading widget..." for good).
"""

from __future__ import annotations

import base64
import contextlib
import copy
import math
import re
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import ipywidgets as W
import numpy as np
import plotly.graph_objects as go

from asrsched.figures.layout import TABLE_CSS, live_layout
from asrsched.figures.style import PRINT_HEIGHT, PRINT_WIDTH, default_formats, export_dir, export_figure, shown_path

__all__ = [
    "Panel",
    "ExplorerFigure",
    "control_state",
    "slider_range",
    "send_figure_state",
    "static_png",
    "export_view_button",
]

#: the ``FigureWidget`` traits that carry the whole figure to the front end (and into a saved widget state)
FIGURE_STATE = ("_widget_data", "_widget_layout")


def _as_lists(value):
    """A widget state with plotly's binary arrays (``{"buffer", "dtype", "shape"}``) written as lists
    (non-finite values as ``None``, which plotly draws as gaps and JSON can carry)."""
    if isinstance(value, dict):
        if {"buffer", "dtype", "shape"} <= set(value):
            a = np.frombuffer(value["buffer"], dtype=value["dtype"])  # plotly sends 1-D arrays only this way
            return [x if math.isfinite(x) else None for x in a.tolist()] if a.dtype.kind == "f" else a.tolist()
        return {k: _as_lists(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_as_lists(v) for v in value]
    return value


class ExplorerFigure(go.FigureWidget):
    """The ``FigureWidget`` of an explorer: the same figure, its arrays sent as JSON lists, never as binary
    buffers (module docstring: a buffer in a notebook's saved widget state can break its restore)."""

    def get_state(self, key=None, drop_defaults=False):
        return _as_lists(super().get_state(key=key, drop_defaults=drop_defaults))


def slider_range(lo: float, hi: float, value: float) -> dict[str, float]:
    """A slider's ``min``, ``max`` and ``value``: ``[lo, hi]`` widened to hold ``value``, so a notebook's
    parameter is never clipped to the slider's usual range (``W.FloatSlider(**slider_range(1, 25, rate))``)."""
    return {"min": min(lo, value), "max": max(hi, value), "value": value}


def control_state(controls: Sequence[W.ValueWidget]) -> dict[str, Any]:
    """The explorer's controls as ``{description: value}``, in order (what the export sidecar records)."""
    return {w.description: w.value for w in controls}


def send_figure_state(fig: go.FigureWidget) -> None:
    """Send the figure as it is now to the front end as the widget's own state (``_widget_data``, ``_widget_layout``).

    plotly syncs the two only when a FigureWidget is itself displayed; an explorer's figure sits inside a
    container, so a kernel client that records widget state (nbclient, writing ``metadata.widgets``) saw
    the figure empty. The traits are set in Python too, so a later state request answers the same. One
    ``update`` message after :func:`asrsched.figures.style.setup` (whose state refresh holds the assignment
    back), two without it.
    """
    with fig.hold_sync():
        fig._widget_layout = copy.deepcopy(fig._layout_obj._props)
        fig._widget_data = copy.deepcopy(fig._data)
    fig.send_state(list(FIGURE_STATE))  # also when asrsched.figures.style.setup() answers state requests itself


def static_png(fig: go.Figure, width: int | None = None, height: int | None = None) -> tuple[bytes | None, str]:
    """``fig`` as a PNG (bytes) through :func:`~asrsched.figures.style.export_figure` (house template, layout pass),
    at its own size (else the print size); ``(None, why)`` when it cannot be drawn, never an exception.

    The export's progress line and any exporter output are swallowed: this runs while a cell's
    output is being formatted.
    """
    from IPython.utils.capture import capture_output

    w = int(width or fig.layout.width or PRINT_WIDTH)
    h = int(height or fig.layout.height or PRINT_HEIGHT)
    try:
        with tempfile.TemporaryDirectory() as tmp, capture_output(display=True):
            written = export_figure(fig, "view", "static", root=tmp, formats=("png",), width=w, height=h)
            return Path(written["png"]).read_bytes(), ""
    except Exception as e:  # a repr must not fail: no Chromium, no kaleido, an exporter error
        reason = str(e).strip().splitlines()[0].split("; ")[0][:160] if str(e).strip() else type(e).__name__
        return None, reason


def _slug(value) -> str:
    """A control value as a short file-name token that keeps its sign: ``-0.5`` -> ``m0p5``, ``True`` -> ``on``,
    ``("e2el", "mean")`` -> ``e2el-mean``, ``"SJF (cap 5)"`` -> ``sjf_cap_5``."""
    import numbers

    if isinstance(value, bool):
        return "on" if value else "off"
    if isinstance(value, numbers.Real):
        return f"{value:g}".replace("-", "m").replace("+", "").replace(".", "p")
    if isinstance(value, (tuple, list)):
        return "-".join(map(_slug, value))
    return re.sub(r"[^A-Za-z0-9]+", "_", str(value)).strip("_").lower()[:24] or "none"


def export_view_button(fig: go.Figure, notebook: str, *, name: str = "view", state=None, formats=None, root=None):
    """An "export this view" control for an explorer: a button that writes the figure as it is now.

    Returns an ``ipywidgets.HBox`` (button + a status line). A click writes ``<stem>.{html,png,svg}`` (house
    style and layout, as :func:`export_figure`) into the run's folder (:func:`export_dir`) and says where; the
    stem is ``name`` and each value of ``state()`` (the explorer's ``{description: value}``) as a token that
    keeps its sign (``-0.5`` -> ``m0p5``), or ``<name>_<HHMMSS>`` without ``state``. A sidecar ``<stem>.json``
    holds the whole control state and the time. It also carries the CSS that lets the explorer's tables wrap and
    scroll, and keeps the live figure laid out as it redraws (:func:`asrsched.figures.layout.live_layout`).
    """
    import json

    import ipywidgets as W

    live_layout(fig)
    tip = "write this figure as " + ", ".join(formats or default_formats()) + " into the run folder"
    button = W.Button(description="export this view", icon="download", tooltip=tip, layout=W.Layout(width="auto"))
    status = W.HTML(TABLE_CSS)

    def on_click(_):
        controls = dict(state()) if state is not None else {}
        stem = f"{name}_" + ("_".join(map(_slug, controls.values())) if controls else time.strftime("%H%M%S"))[:120]
        button.disabled = True
        status.value = TABLE_CSS + "<i>exporting…</i>"
        try:
            written = export_figure(fig, stem, notebook, root=root, formats=formats)
            files, side = sorted(p.name for p in written.values()), export_dir(notebook, root) / f"{stem}.json"
            record = dict(figure=name, notebook=notebook, controls=controls, time=time.strftime("%Y-%m-%dT%H:%M:%S%z"))
            side.write_text(json.dumps({**record, "files": files}, indent=1, ensure_ascii=False, default=str) + "\n")
            written["json"] = side
        except (RuntimeError, ValueError, OSError) as e:
            status.value = TABLE_CSS + f"<b style='color:#D55E00'>export failed: {e}</b>"
        else:
            where = shown_path(side.parent)
            status.value = TABLE_CSS + f"wrote <code>{stem}</code> ({', '.join(written)}) to <code>{where}</code>"
        finally:
            button.disabled = False

    button.on_click(on_click)
    return W.HBox([button, status])


class Panel(W.VBox):
    """An explorer: ``rows`` (controls, figure, tables) and its "export this view" button, in a VBox.

    ``fig`` is the explorer's FigureWidget, ``name`` its key (the export's file stem starts with it),
    ``notebook`` where its exports go, ``controls`` the widgets whose values make its state. Shown,
    it is the live widget view, a PNG of its first view and a one-line text (module docstring).
    """

    def __init__(
        self,
        rows: Sequence[W.Widget],
        *,
        fig: go.FigureWidget,
        name: str,
        notebook: str,
        controls: Sequence[W.ValueWidget],
        **kwargs,
    ) -> None:
        controls = list(controls)
        button = export_view_button(fig, notebook, name=name, state=lambda: control_state(controls))
        super().__init__([*rows, button], **kwargs)
        self.figure, self.name, self.controls = fig, name, controls
        self._static: tuple[bytes | None, str, int] | None = None

    def static_view(self) -> tuple[bytes | None, str, int]:
        """``(png, note, width)``: the figure as first shown (rendered once), or ``None`` and why not."""
        if self._static is None:
            w = int(self.figure.layout.width or PRINT_WIDTH)
            png, note = static_png(self.figure, width=w)
            self._static = (png, note, w)
        return self._static

    def _repr_mimebundle_(self, **kwargs):
        data = super()._repr_mimebundle_(**kwargs) or {}
        with contextlib.suppress(Exception):  # no comm (plain Python): nothing to send
            send_figure_state(self.figure)
        png, note, width = self.static_view()
        what = f"{self.name}: an interactive explorer (controls over a plotly figure; live with a running kernel)"
        if png is None:
            data["text/plain"] = f"{what}; no static image of it: {note}"
            return data
        data["text/plain"] = f"{what}; the image shows its first view"
        data["image/png"] = base64.b64encode(png).decode("ascii")
        return data, {"image/png": {"width": width}}
