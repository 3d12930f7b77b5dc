"""Notebook parameters: the ``parameters`` cell, parameter files and ``-p NAME VALUE`` values.

A parameter file is JSON, ``{"02_policy_sweep": {"N_REQUESTS": 500}, "02": {...}, "*": {"SEED": 1}}``:
keys are notebook stems, number prefixes or ``"*"`` (every notebook that has the parameter).

The small set of every notebook lives in one file beside the notebooks, ``notebooks/small_params.json``
(shipped with them): ``asrsched run NN --small`` and ``asrsched dashboard NN --small`` use it, the
browser tests run every notebook with it, and the README's quick-start table is
:func:`small_params_table` of it (a test compares them).
"""

from __future__ import annotations

import ast
import contextlib
import json
import os
import re
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

__all__ = [
    "as_flag",
    "parse_value",
    "load_params",
    "notebook_parameters",
    "params_for",
    "check_parameters",
    "run_checks",
    "named_as",
    "CHECKS_TAG",
    "value_problem",
    "small_params",
    "small_params_path",
    "small_params_table",
    "SMALL_PARAMS_FILE",
    "RENAMED",
]

SMALL_PARAMS_FILE = "small_params.json"
#: the tag of a notebook cell that only checks the parameters (cheap: no run, no server, no file written);
#: the notebook runs it right after its parameters, and ``asrsched run``/``dashboard`` run it before
#: starting anything (:func:`run_checks`)
CHECKS_TAG = "checks"

#: Notebook parameters renamed to the one vocabulary (CONTRIBUTING, *Vocabulary*): old name → new
#: name, per notebook. Passing an old name is an error that names the new one.
RENAMED: dict[str, dict[str, str]] = {
    "02_policy_sweep": {
        "N_JOBS": "WORKERS",
        "LOADS": "RHOS",
        "HEADLINE_LOAD": "HEADLINE_RHO",
        "OVERLOAD_LOAD": "OVERLOAD_RHO",
        "CDF_LOAD": "CDF_RHO",
    },
    "04_real_serving": {"WORKERS": "SERVER_SLOTS", "LOADS": "RHOS"},
    "05_ab_estimators": {
        "N_JOBS": "N_REQUESTS",
        "TRUTH_JOBS_QUICK": "TRUTH_REQUESTS_QUICK",
        "TRUTH_JOBS_FULL": "TRUTH_REQUESTS_FULL",
        "WP_JOBS": "WP_REQUESTS",
    },
    "06_ab_asr_policies": {"N_JOBS": "WORKERS", "LOAD": "RHO"},
}


def parse_value(value: Any) -> Any:
    """A parameter value from text: a Python literal (``"[6, 19]"`` → list, ``"0.5"`` → float) or else
    the string itself. Non-strings are returned unchanged."""
    if not isinstance(value, str):
        return value
    try:
        return ast.literal_eval(value)
    except (ValueError, SyntaxError):
        return value


def load_params(path: str | os.PathLike | None) -> dict[str, dict]:
    """Read a JSON parameter file (``{notebook_stem_or_*: {NAME: value}}``)."""
    if not path:
        return {}
    try:
        d = json.loads(Path(path).read_text())
    except FileNotFoundError:
        raise FileNotFoundError(f"parameter file not found: {path}") from None
    except json.JSONDecodeError as e:
        raise ValueError(f"parameter file {path} is not valid JSON: {e}") from None
    if not isinstance(d, dict) or not all(isinstance(v, dict) for v in d.values()):
        raise ValueError(f"parameter file {path} must map notebook names to {{NAME: value}} objects")
    return d


def notebook_parameters(nb: str | os.PathLike) -> dict[str, Any]:
    """Names and default values (source text) of a notebook's ``parameters`` cell."""
    import papermill as pm

    return {k: v["default"] for k, v in pm.inspect_notebook(str(nb)).items()}


def params_for(
    stem: str, params: Mapping[str, Mapping[str, Any]], known: Mapping[str, Any] | None = None
) -> dict[str, Any]:
    """The values of ``params`` (a parameter file's content) for notebook ``stem``.

    ``"*"`` applies where the notebook has the parameter (``known``: its parameter names), then the
    number prefix (``"02"``), then the full stem; later ones win.
    """
    old = RENAMED.get(stem, {})  # an old name is kept, so that check_parameters names its new one
    p = {k: v for k, v in params.get("*", {}).items() if known is None or k in known or k in old}
    p.update(params.get(stem.split("_")[0], {}))
    p.update(params.get(stem, {}))
    return p


def check_parameters(nb: str | os.PathLike, params: Mapping[str, Any]) -> dict[str, Any]:
    """The notebook's parameters (:func:`notebook_parameters`), after checking the names in ``params``.

    A renamed parameter (:data:`RENAMED`) raises ``ValueError`` naming its new name; any other
    unknown name raises ``ValueError`` listing the allowed ones; a value of the wrong kind or a mistyped
    literal raises ``ValueError`` naming the parameter (:func:`value_problem`); a value out of range raises the
    notebook's own check (:func:`run_checks`). Nothing has run yet when it raises.
    """
    stem = Path(nb).stem
    known = notebook_parameters(nb)
    old = {k: RENAMED.get(stem, {})[k] for k in params if k not in known and k in RENAMED.get(stem, {})}
    if old:
        raise ValueError(f"{stem}: parameter(s) renamed: " + "; ".join(f"{k} is now {v}" for k, v in old.items()))
    unknown = sorted(set(params) - set(known))
    if unknown:
        raise ValueError(f"{stem}: unknown parameter(s) {', '.join(unknown)}; allowed: {', '.join(known)}")
    bad = [msg for name, value in params.items() if (msg := value_problem(name, value, known[name]))]
    if bad:
        raise ValueError(f"{stem}: " + "; ".join(bad))
    run_checks(nb, params)
    return known


def as_flag(message: str, flags: Mapping[str, str]) -> str:
    """A library error with its parameter named as a command-line user wrote it: ``as_flag("rhos must be > 0",
    {"rhos": "--rhos"})`` is ``"--rhos must be > 0"``; the name must open the message, followed by ``:``, ``,``
    or a space. A message naming none of ``flags`` comes back unchanged (the CLI twin of :func:`named_as`)."""
    for name, flag in flags.items():
        if any(message.startswith(name + sep) for sep in (":", ",", " ")):
            return flag + message[len(name) :]
    return message


@contextlib.contextmanager
def named_as(**names: str | tuple[str, ...]) -> Iterator[None]:
    """Re-raise a ``ValueError`` from the library naming the notebook parameter: ``named_as(N_REQUESTS="n_requests")``
    turns ``"n_requests must be >= 1, got 0"`` into ``"N_REQUESTS: n_requests must be >= 1, got 0"`` and
    ``"p: the treatment probability must be in (0, 1)"`` into ``"P (p): the treatment probability ..."``.

    The message is matched on the library's name (or one of a tuple of names) at its start; a message naming
    none of them passes unchanged.
    """
    try:
        yield
    except ValueError as e:
        msg = str(e)
        for param, internal in names.items():
            for name in (internal,) if isinstance(internal, str) else internal:
                if msg.startswith(f"{name}: "):  # "p: must be in (0, 1)" -> "P (p): must be in (0, 1)"
                    raise ValueError(f"{param} ({name}): {msg[len(name) + 2 :]}") from None
                if re.match(rf"{re.escape(name)}\b", msg):
                    raise ValueError(f"{param}: {msg}") from None
        raise


def run_checks(nb: str | os.PathLike, params: Mapping[str, Any]) -> None:
    """Run the notebook's ``checks`` cells (:data:`CHECKS_TAG`) on its defaults overlaid with ``params``, here,
    before anything starts: a value out of range raises the notebook's own ``ValueError`` (prefixed by the
    notebook's name), as it would a few seconds into the run. A notebook without such a cell is not checked.
    """
    import nbformat

    stem = Path(nb).stem
    cells = nbformat.read(str(nb), as_version=4).cells
    checks = [c.source for c in cells if c.cell_type == "code" and CHECKS_TAG in c.metadata.get("tags", [])]
    if not checks:
        return
    ns: dict[str, Any] = {}
    for c in cells:
        if c.cell_type == "code" and "parameters" in c.metadata.get("tags", []):
            exec(compile(c.source, f"<{stem} parameters>", "exec"), ns)  # noqa: S102 (the notebook's own literals)
    ns.update(params)
    try:
        for src in checks:
            exec(compile(src, f"<{stem} checks>", "exec"), ns)  # noqa: S102 (the notebook's own check cell)
    except ValueError as e:
        raise ValueError(f"{stem}: {e}") from None


_KINDS = {bool: "True or False", int: "a number", float: "a number", str: "a string", list: "a list", dict: "a dict"}


def _kind(value: Any) -> str | None:
    """The kind of a parameter value as :data:`_KINDS` names it (a tuple is a list); ``None`` for ``None``."""
    if value is None:
        return None
    if isinstance(value, tuple):
        value = list(value)
    return _KINDS.get(type(value), type(value).__name__)


def value_problem(name: str, value: Any, default_src: str) -> str | None:
    """Why ``value`` cannot be notebook parameter ``name`` (whose default's source text is ``default_src``),
    or ``None`` when it can.

    The value must be of the default's kind (a number, True or False, a string, a list, a dict; ``None`` is
    accepted for any parameter, and a parameter whose default is ``None`` or an expression takes any kind).
    A string that opens or closes like a list, dict or tuple but is not a Python literal (``"[5, 15"``) is
    refused for every parameter: it is a value mistyped on the command line, not a string.
    """
    if isinstance(value, str):
        text = value.strip()
        if text and (text[0] in "[{(" or text[-1] in "]})"):
            try:
                ast.literal_eval(text)
            except (ValueError, SyntaxError):
                return f"{name} = {value!r} is not a Python literal (a list is written [5, 15])"
    try:
        default = ast.literal_eval(default_src)
    except (ValueError, SyntaxError):
        return None  # an expression: its kind is not known here
    want, got = _kind(default), _kind(value)
    if want is None or got is None or want == got:
        return None
    return f"{name} must be {want} like its default {default_src}, got {value!r} ({got})"


def small_params_path(root: str | os.PathLike | None = None) -> Path:
    """``notebooks/small_params.json``: every notebook's small parameter set (about 30 s a notebook)."""
    from asrsched.app.paths import notebooks_dir

    return notebooks_dir(root) / SMALL_PARAMS_FILE


def small_params(root: str | os.PathLike | None = None) -> dict[str, dict]:
    """Every notebook's small parameter set, ``{notebook stem: {NAME: value}}`` (:func:`small_params_path`)."""
    path = small_params_path(root)
    if not path.is_file():
        raise FileNotFoundError(f"no small parameter sets beside the notebooks: {path} is missing")
    return load_params(path)


def _as_python(value: Any) -> str:
    """``value`` as a ``parameters`` cell writes it: Python literals, strings in double quotes."""
    if isinstance(value, list | tuple):
        return "[" + ", ".join(_as_python(v) for v in value) + "]"
    if isinstance(value, dict):
        return "{" + ", ".join(f"{_as_python(k)}: {_as_python(v)}" for k, v in value.items()) + "}"
    if isinstance(value, str):
        return json.dumps(value)
    return repr(value)


def small_params_table(params: Mapping[str, Mapping[str, Any]]) -> str:
    """The README's quick-start table: a row per notebook, every small parameter as ``NAME = value``."""
    rows = [
        "| notebook | small parameters (`asrsched run NN --small`; set them in the `parameters` cell) |",
        "|---|---|",
    ]
    for stem, p in params.items():
        rows.append(f"| `{stem}` | " + ", ".join(f"`{k} = {_as_python(v)}`" for k, v in p.items()) + " |")
    return "\n".join(rows) + "\n"
