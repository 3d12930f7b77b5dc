"""The size estimate of one vLLM engine request: :class:`SizeEstimator` (what SJF, HRRN and adaptive rank by).

It reads the request's ``sampling_params.extra_args`` (the keys are tabulated in
:mod:`asrsched.vllm_plugin.scheduler`) and ``max_tokens``, and forms the estimate with
:meth:`asrsched.core.service.ServiceModel.est_service`, the one size estimate of the package, so a
``ServiceModel`` subclass that overrides it changes this estimate too. Nothing here imports vLLM.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Mapping
from typing import Any

from asrsched.core.service import ServiceModel, default_service_model
from asrsched.core.uploads import DEFAULT_SIZING, UploadRegistry, check_sizing, n_chunks, sized_duration

__all__ = [
    "SizeEstimator",
    "check_default_language",
    "requested_policy",
    "XARG_DURATION",
    "XARG_SPEECH",
    "XARG_LANGUAGE",
    "XARG_EST",
    "XARG_POLICY",
    "XARG_UPLOAD_ID",
    "XARG_UPLOAD_DURATION",
    "XARG_CHUNK_INDEX",
    "chunk_index_from_id",
]

log = logging.getLogger("asrsched.vllm_plugin.scheduler")

# extra_args keys read from each request
XARG_DURATION = "audio_duration_s"
XARG_SPEECH = "speech_duration_s"
XARG_LANGUAGE = "language"
XARG_EST = "est_service_s"
#: the policy a request asks the waiting queue to run (read only when the plug-in's ``policy_switch`` is on)
XARG_POLICY = "policy"
#: a long upload: its id, its total duration (s) and, from a client that cuts it itself, a chunk's place in it
XARG_UPLOAD_ID = "upload_id"
XARG_UPLOAD_DURATION = "upload_duration_s"
XARG_CHUNK_INDEX = "chunk_index"


def chunk_index_from_id(request_id: Any) -> int | None:
    """The chunk index vLLM writes into the engine request id of a chunk of a long upload
    (``<request id>-<index>-<8 random characters>``), else ``None``."""
    parts = str(request_id).rsplit("-", 2)
    return int(parts[1]) if len(parts) == 3 and parts[1].isdigit() else None


def check_default_language(model: ServiceModel, language: str) -> str:
    """``language`` if ``model`` has a kappa for it, else ``ValueError`` naming the key ``default_language``
    and the allowed values (the model's languages)."""
    if language not in model.kappa:
        raise ValueError(
            f"asrsched default_language {language!r} is not a language of the service model "
            f"{model.name!r}; allowed values: {', '.join(sorted(model.kappa))}"
        )
    return language


def requested_policy(request: Any, current: str, known: tuple[str, ...] | frozenset[str]) -> str | None:
    """The policy ``request`` asks for (its ``extra_args[XARG_POLICY]``), when it names one other than
    ``current``; else ``None``. A name not in ``known`` is logged and ignored: the request is queued under
    the current policy, never refused. A family's member (``nudge_m4_0.4``, ``gamma_boost_0.5``) is known once
    its name parses: the registry registers it here, as a server started with it would."""
    from asrsched.core.policies import validate_policies

    xa = getattr(getattr(request, "sampling_params", None), "extra_args", None)
    want = xa.get(XARG_POLICY) if isinstance(xa, Mapping) else None
    if want is None:
        return None
    name = str(want).strip().lower()
    if name not in known:
        try:
            (name,) = validate_policies([name])
        except ValueError:
            name = ""
    if not name:
        log.warning(
            "asrsched: request %s asks for policy %r, which is unknown (allowed: %s); it is queued under %s",
            getattr(request, "request_id", "?"),
            want,
            ", ".join(sorted(known)),
            current,
        )
        return None
    return None if name == current else name


def _positive(x: Any) -> float | None:
    try:
        v = float(x)
    except (TypeError, ValueError):
        return None
    return v if math.isfinite(v) and v >= 0 else None


class SizeEstimator:
    """Estimated service time of one engine request (see :mod:`asrsched.vllm_plugin.scheduler` for the rules).

    ``estimate(request)`` returns ``(est_service_s, info)``; ``info`` records the
    duration used, the language and ``source``: ``"duration"``, ``"speech"``,
    ``"client"``, ``"lang_detect"``, ``"unknown"`` or ``"invalid"``.

    The estimate is ``model.est_service(min(d, window_s), language, max_tokens=max_tokens)``.
    Language: the requested one when the model has a kappa for it, else ``default_language``
    (which must be a language of the model: ``ValueError`` naming ``default_language`` here and
    in :class:`~asrsched.vllm_plugin.config.PluginConfig` otherwise). The fallback is legitimate
    here: vLLM has accepted the request, so it must be ranked, and a language the profile did not
    measure (or none, before language detection) is best sized like the deployment's own language.
    ``info["language"]`` (and the job's language) is the language whose kappa was used.
    """

    def __init__(
        self,
        model: ServiceModel | None = None,
        *,
        default_language: str = "en",
        unknown_duration_s: float = 30.0,
        upload_sizing: str = DEFAULT_SIZING,
    ):
        self.model = model or default_service_model()
        self.default_language = check_default_language(self.model, default_language)
        self.unknown_duration_s = float(unknown_duration_s)
        self.upload_sizing = check_sizing(upload_sizing, "asrsched upload_sizing")
        self.uploads = UploadRegistry()
        self._warned: set[str] = set()

    def language(self, requested: Any) -> str:
        """The language a request is sized in: ``requested`` if the model knows it, else the default one."""
        lang = str(requested) if requested else self.default_language
        return lang if lang in self.model.kappa else self.default_language

    def _warn(self, what: str, msg: str) -> None:
        if what not in self._warned:
            self._warned.add(what)
            log.warning("asrsched: %s (further cases not logged)", msg)

    def estimate_from(
        self, extra_args: Mapping[str, Any] | None, max_tokens: int | None, request_id: Any = None
    ) -> tuple[float, dict]:
        """Estimate from a request's ``extra_args``, ``max_tokens`` and engine request id (engine-free, for tests)."""
        xa = extra_args or {}
        lang = self.language(xa.get(XARG_LANGUAGE))
        window = self.model.window_s
        est_client = _positive(xa.get(XARG_EST)) if XARG_EST in xa else None
        if est_client is not None:
            return est_client, {"source": "client", "duration_s": _positive(xa.get(XARG_DURATION)), "language": lang}
        source = "duration"
        d = None
        if XARG_SPEECH in xa:
            d = _positive(xa.get(XARG_SPEECH))
            source = "speech"
        if d is None and XARG_DURATION in xa:
            d = _positive(xa.get(XARG_DURATION))
            source = "duration"
            if d is None:
                self._warn(
                    "bad_duration",
                    f"request extra_args {XARG_DURATION}={xa.get(XARG_DURATION)!r} is not a "
                    "non-negative number; treating the request as of unknown size",
                )
                source = "invalid"
        if d is None:
            if max_tokens is not None and max_tokens <= 1:
                source, d = "lang_detect", window
            else:
                source = "unknown" if source != "invalid" else source
                d = self.unknown_duration_s
        # every engine request holds at most one window of audio (vLLM cuts long audio into chunks)
        d_sized, upload = self._sized(xa, d, source, request_id, max_tokens)
        if upload and d_sized > window and max_tokens is not None:  # the decode limit is per chunk
            max_tokens = max_tokens * n_chunks(d_sized, window)
        est = float(self.model.est_service(d_sized, lang, max_tokens=max_tokens))
        info = {"source": source, "duration_s": d, "language": lang}
        if upload:
            info.update(upload)
        return est, info

    def _sized(
        self, xa: Mapping[str, Any], d: float, source: str, request_id: Any, max_tokens: int | None = None
    ) -> tuple[float, dict]:
        """The duration the estimate reads (:func:`asrsched.core.uploads.sized_duration`) and, for a chunk of a
        long upload, what was used (``sizing``, ``upload_s``, ``chunk_index``). A bad upload id, duration or
        index is logged and the chunk sized by its own window: the request is never refused."""
        window = self.model.window_s
        if source == "lang_detect" or (max_tokens is not None and max_tokens <= 1):
            return min(d, window), {}  # language detection on an upload's first chunk: one window, one token
        total = _positive(xa.get(XARG_UPLOAD_DURATION)) if XARG_UPLOAD_DURATION in xa else None
        if total is None and source in ("duration", "speech") and d > window:
            total = d  # vLLM's chunks all carry the whole upload's duration
        if total is None or total <= window:
            return min(d, window), {}
        sizing = self.upload_sizing
        idx: Any = xa.get(XARG_CHUNK_INDEX)
        from_id = idx is None
        if from_id:
            idx = chunk_index_from_id(request_id)
        try:
            if XARG_UPLOAD_ID in xa:
                total = self.uploads.check(xa[XARG_UPLOAD_ID], total)
            k = n_chunks(total, window)
            if from_id and idx is not None and idx == k:
                idx = k - 1  # vLLM's energy split cuts chunks up to a second short: one more chunk, sized as the last
            if idx is None:
                if sizing == "chunk":  # vLLM's way: every chunk one window
                    return min(d, window), {"sizing": sizing, "upload_s": total, "chunk_index": None}
                if sizing == "remaining":
                    raise ValueError("no chunk index in the request id or extra_args")
                idx = 0
            out = float(sized_duration(total, idx, sizing, window))
        except ValueError as e:
            self._warn(
                "bad_upload", f"request {request_id}: {e}; the chunk is sized by its own window (upload_sizing=chunk)"
            )
            return min(d, window), {"sizing": "chunk", "upload_s": total, "chunk_index": idx, "fallback": str(e)}
        return out, {"sizing": sizing, "upload_s": total, "chunk_index": int(idx)}

    def estimate(self, request: Any) -> tuple[float, dict]:
        """Estimate for a vLLM ``Request`` (reads ``sampling_params.extra_args`` and ``max_tokens``)."""
        sp = getattr(request, "sampling_params", None)
        xa = getattr(sp, "extra_args", None) if sp is not None else None
        mt = getattr(sp, "max_tokens", None) if sp is not None else None
        return self.estimate_from(xa, mt, getattr(request, "request_id", None))
