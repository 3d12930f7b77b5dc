"""Exported figures read back: the figure inside an HTML export, and that figure written again in other formats.

:func:`figure_from_html` and :func:`html_figure_parts` read what :func:`asrsched.figures.style.export_figure`
wrote (plotly's ``write_html``); :func:`reexport` writes it again, e.g. as PDF, without re-running the
notebook (``asrsched export``).
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import plotly.graph_objects as go

from asrsched.figures.style import PRINT_HEIGHT, PRINT_WIDTH, export_figure

__all__ = ["figure_from_html", "html_figure_parts", "reexport"]


def figure_from_html(path: str | os.PathLike) -> go.Figure:
    """The figure inside an HTML file written by :func:`asrsched.figures.style.export_figure` (plotly's ``write_html``).

    Raises ``ValueError`` if the file holds no ``Plotly.newPlot(...)`` call.
    """
    data, layout = html_figure_parts(path)
    return go.Figure(data=data, layout=layout)


def html_figure_parts(path: str | os.PathLike) -> tuple[list, dict]:
    """``(data, layout)`` as plain JSON values from a plotly HTML export (no figure validation: cheap).

    Raises ``ValueError`` if the file holds no ``Plotly.newPlot(...)`` call.
    """
    text = Path(path).read_text(encoding="utf-8", errors="replace")
    i = text.rfind("Plotly.newPlot(")
    if i < 0:
        raise ValueError(f"{path}: not a plotly HTML export (no Plotly.newPlot call)")
    dec = json.JSONDecoder()
    pos = i + len("Plotly.newPlot(")
    values = []
    for _ in range(3):  # div id, data, layout
        while text[pos] in " \t\r\n,":
            pos += 1
        value, pos = dec.raw_decode(text, pos)
        values.append(value)
    return values[1], values[2]


def reexport(
    path: str | os.PathLike,
    formats: tuple[str, ...] = ("pdf",),
    *,
    out_dir: str | os.PathLike | None = None,
    width: int = PRINT_WIDTH,
    height: int = PRINT_HEIGHT,
) -> dict[str, Path]:
    """Write an exported figure (its ``.html``) again in ``formats``, beside it or into ``out_dir``.

    ``asrsched export runs/02_policy_sweep/<run>/throughput.html --formats pdf`` calls this: one
    figure, by name, as PDF, without re-running the notebook.
    """
    src = Path(path)
    if src.suffix.lower() != ".html":
        src = src.with_suffix(".html")
    if not src.is_file():
        raise FileNotFoundError(f"no exported figure {src} (give the .html written by export_figure)")
    fig = figure_from_html(src)
    dest = Path(out_dir) if out_dir is not None else src.parent
    return export_figure(fig, src.stem, dest.name, root=dest.parent, formats=formats, width=width, height=height)
