"""Tiny helper to write notebooks from a list of (kind, source) cells; outputs are never stored.

Usage inside a generator script:  write_notebook(path, [("md", "..."), ("params", "..."), ("code", "...")])
"""
import nbformat
from nbformat.v4 import new_code_cell, new_markdown_cell, new_notebook


def write_notebook(path, cells):
    nb = new_notebook()
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
    nb.metadata["language_info"] = {"name": "python"}
    for kind, src in cells:
        src = src.strip("\n")
        if kind == "md":
            nb.cells.append(new_markdown_cell(src))
        elif kind == "params":
            c = new_code_cell(src)
            c.metadata["tags"] = ["parameters"]
            nb.cells.append(c)
        else:
            nb.cells.append(new_code_cell(src))
    for i, c in enumerate(nb.cells):
        c["id"] = f"c{i:02d}"
    nbformat.validate(nb)
    nbformat.write(nb, path)
