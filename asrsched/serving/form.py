"""The upload's form, checked: every field OpenAI's transcription endpoint takes, or a 4xx naming the field.

:func:`parse_form` reads the multipart form of ``POST /v1/audio/transcriptions`` (and ``/translations``)
for :mod:`asrsched.serving.app`: the file (size, container, channels, duration from its header), ``model``,
``language``, ``prompt``, ``response_format``, ``stream``, ``temperature``, ``timestamp_granularities[]``,
``include[]`` and vLLM's ``vllm_xargs`` (a JSON string, or the bracketed fields the ``openai`` client
makes of a dict). A value this server cannot honour is refused with a 400 that names it
(:func:`error_response`), never silently ignored.
"""

from __future__ import annotations

import json
from typing import Any

from asrsched.core.priority import check_priority
from asrsched.serving.config import ServerConfig
from asrsched.serving.loadgen import RESPONSE_FORMATS
from asrsched.whisper.audio import AudioError, audio_info

__all__ = ["parse_form", "error_response", "truthy", "TIMESTAMP_GRANULARITIES"]

#: the timestamp granularities this server gives ("word" needs timestamp tokens, which its engine does not decode)
TIMESTAMP_GRANULARITIES = ("segment",)


def error_response(
    status: int,
    message: str,
    *,
    type_: str = "invalid_request_error",
    param: str | None = None,
    code: str | None = None,
    headers: dict | None = None,
):
    """An OpenAI-style JSON error: ``{"error": {"message", "type", "param", "code"}}`` with ``status``."""
    from starlette.responses import JSONResponse

    return JSONResponse(
        {"error": {"message": message, "type": type_, "param": param, "code": code or status}},
        status_code=status,
        headers=headers,
    )


def truthy(v: Any) -> bool | None:
    """A form's boolean (``true``/``1``/``yes``/``on`` or their opposites, or empty); ``None`` if it is neither."""
    s = str(v).strip().lower()
    if s in ("true", "1", "yes", "on"):
        return True
    if s in ("false", "0", "no", "off", ""):
        return False
    return None


async def parse_form(form, task: str, config: ServerConfig, engine: Any):
    """Check a transcription or translation form (``task``: ``"transcribe"`` or ``"translate"``) against
    ``config`` and the local ``engine`` (``None`` in upstream mode): ``(audio bytes, duration in s, the
    request's fields)``, or the 4xx JSON response naming the first bad field."""
    max_bytes = int(config.max_upload_mb * 1024 * 1024)
    up = form.get("file")
    if up is None or isinstance(up, str):
        return error_response(
            400,
            "missing 'file': send the audio as a multipart file part named 'file'",
            param="file",
            code="missing_file",
        )
    data = await up.read()
    if len(data) > max_bytes:
        return error_response(
            413,
            f"upload of {len(data)} bytes exceeds the {config.max_upload_mb:g} MB limit",
            param="file",
            code="too_large",
        )
    model = str(form.get("model") or config.model)
    if model not in config.model_names:
        return error_response(
            404,
            f"The model `{model}` does not exist; this server serves: {', '.join(sorted(config.model_names))}",
            type_="NotFoundError",
            param="model",
            code="model_not_found",
        )
    fmt = str(form.get("response_format") or "json")
    if fmt not in RESPONSE_FORMATS:
        return error_response(
            400, f"response_format must be one of {', '.join(RESPONSE_FORMATS)}; got {fmt!r}", param="response_format"
        )
    stream = truthy(form.get("stream", "false"))
    if stream is None:
        return error_response(400, f"stream must be true or false; got {form.get('stream')!r}", param="stream")
    if stream and fmt == "verbose_json":
        return error_response(
            400, "stream=true supports response_format json or text, not verbose_json", param="response_format"
        )
    language = str(form.get("language") or "").strip().lower() or None
    if engine is not None:
        if not engine.multilingual and language not in (None, "en"):
            return error_response(
                400,
                f"model {config.model!r} is English-only; language must be 'en', got {language!r}",
                param="language",
            )
        if language is not None and language not in engine.languages:
            return error_response(
                400,
                f"language {language!r} is not supported by {config.model!r} (ISO 639-1 codes such as en, es, de, id)",
                param="language",
            )
    if task == "translate" and engine is not None and not engine.multilingual:
        return error_response(
            400,
            f"model {config.model!r} is English-only and cannot translate; serve a multilingual "
            "model (--model base) for /v1/audio/translations",
            param="model",
            code="unsupported_task",
        )
    prompt = str(form.get("prompt") or "").strip() or None
    grans = [
        str(g).strip()
        for k in ("timestamp_granularities[]", "timestamp_granularities")
        for g in form.getlist(k)
        if str(g).strip()
    ]
    for g in grans:
        if g not in ("segment", "word"):
            return error_response(
                400,
                f"timestamp_granularities values are 'segment' or 'word', got {g!r}",
                param="timestamp_granularities",
                code="invalid_value",
            )
        if g not in TIMESTAMP_GRANULARITIES:
            return error_response(
                400,
                f"timestamp_granularities {g!r} is not supported by this server: it decodes without "
                "timestamp tokens, so only 'segment' timestamps (one per decoded window) exist",
                param="timestamp_granularities",
                code="unsupported_value",
            )
    if grans and fmt != "verbose_json":
        return error_response(
            400,
            f"timestamp_granularities needs response_format 'verbose_json', got {fmt!r}",
            param="timestamp_granularities",
            code="invalid_value",
        )
    inc = [str(v).strip() for k in ("include[]", "include") for v in form.getlist(k) if str(v).strip()]
    if inc:
        return error_response(
            400,
            f"include {', '.join(map(repr, inc))} is not supported by this server (it keeps no "
            "log-probabilities); leave 'include' out",
            param="include",
            code="unsupported_value",
        )
    bracketed = {
        k[len("vllm_xargs[") : -1]: v for k, v in form.multi_items() if k.startswith("vllm_xargs[") and k.endswith("]")
    }
    xargs = form.get("vllm_xargs")
    if xargs:
        try:
            if not isinstance(json.loads(str(xargs)), dict):
                raise ValueError
        except ValueError:
            return error_response(400, f"vllm_xargs must be a JSON object, got {str(xargs)[:80]!r}", param="vllm_xargs")
    temp = form.get("temperature")
    if temp not in (None, ""):
        try:
            tv = float(str(temp))
            if not (0.0 <= tv <= 2.0):
                raise ValueError
        except ValueError:
            return error_response(400, f"temperature must be a number in [0, 2], got {temp!r}", param="temperature")
    try:
        info = audio_info(data)
    except AudioError as e:
        name = getattr(up, "filename", None) or "file"
        return error_response(400, f"{name}: {e.reason}: {e.detail}", param="file", code=e.reason)
    if engine is not None and info.channels > 8:
        return error_response(
            400, f"{info.channels} audio channels; at most 8 are mixed to mono", param="file", code="channels"
        )
    raw_prio = form.get("priority")
    if raw_prio in (None, "") and xargs:
        raw_prio = json.loads(str(xargs)).get("priority")
    if raw_prio in (None, ""):
        raw_prio = bracketed.get("priority")
    try:
        priority = check_priority(raw_prio if raw_prio != "" else None)
    except ValueError as e:
        return error_response(400, f"priority {str(e).removeprefix('priority: ')}", param="priority")
    lang = language or (config.default_language if (engine is None or not engine.multilingual) else None)
    del bracketed  # accepted like vLLM's JSON field; this server sizes requests from the audio itself
    return (
        data,
        float(info.duration_s),
        dict(
            language=lang,
            priority=priority,
            model=model,
            response_format=fmt,
            stream=bool(stream),
            prompt=prompt,
            task=task,
            filename=getattr(up, "filename", None),
            content_type=getattr(up, "content_type", None),
        ),
    )
