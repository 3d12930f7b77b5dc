"""The server's configuration: :class:`ServerConfig`, every setting in one validated dataclass.

Local mode (faster-whisper workers on this CPU) or upstream mode (forwarding to another
OpenAI-compatible server), the policy and its parameters, queue limit, timeouts, upload
size and the size-estimate profile. :meth:`ServerConfig.validate` names a bad field and its
allowed values; the derived ``slots``, ``threads_per_slot`` and ``model_names`` are what
the scheduler and the HTTP app read.
"""

from __future__ import annotations

import math
import os
from dataclasses import dataclass, field

from asrsched.core.policies import allowed_policies_text, make_queue, validate_policies
from asrsched.serving.loadgen import transcription_url

__all__ = ["ServerConfig"]


@dataclass
class ServerConfig:
    """Everything the server needs; :meth:`validate` names a bad field and its allowed values.

    ``local_slots``: requests transcribed at once here (faster-whisper workers); ``cpu_threads``
    per slot (default: the cores divided by the slots). ``upstream`` switches to
    forwarding mode with ``max_concurrency`` requests in flight upstream
    (``upstream_model`` renames the model for the upstream). ``queue_limit``: most
    requests waiting (0 = no limit). ``request_timeout_s``: the longest a request may
    take from arrival to its last byte. ``profile``: ServiceModel JSON for the size
    estimate (default: :func:`asrsched.serving.whisper_engine.cpu_service_model` locally, the study's GPU model
    :func:`asrsched.core.service.default_service_model` in upstream mode). ``served_model_names``: more names
    accepted in the ``model`` field (e.g. ``whisper-1``).
    """

    policy: str = "fcfs"
    model: str = "tiny.en"
    local_slots: int = 1
    cpu_threads: int | None = None
    compute_type: str = "int8"
    upstream: str | None = None
    upstream_model: str | None = None
    max_concurrency: int = 4
    queue_limit: int = 0
    request_timeout_s: float = 600.0
    max_upload_mb: float = 25.0
    profile: str | None = None
    policy_params: dict = field(default_factory=dict)
    served_model_names: tuple = ()
    default_language: str = "en"
    warmup: bool = True
    upstream_timeout_s: float = 600.0
    keep_records: int = 100_000

    def validate(self) -> ServerConfig:
        from asrsched.whisper.backends import COMPUTE_TYPES
        from asrsched.whisper.weights import MODELS

        try:  # a family's name (gamma_boost_0.5, nudge_m4_1) registers itself here
            (self.policy,) = validate_policies([self.policy])
        except ValueError as e:
            if not str(e).startswith("unknown policy"):
                raise ValueError(f"policy: {e}") from None
            raise ValueError(f"policy must be one of {allowed_policies_text()}; got {self.policy!r}") from None
        make_queue(self.policy, **self.policy_params)  # bad policy_params fail here
        if self.upstream is None and self.model not in MODELS:
            raise ValueError(f"model must be one of {', '.join(MODELS)} (or use --upstream); got {self.model!r}")
        if self.upstream is not None:
            transcription_url(self.upstream)
        if self.compute_type not in COMPUTE_TYPES:
            raise ValueError(f"compute_type must be one of {', '.join(COMPUTE_TYPES)}; got {self.compute_type!r}")
        for name, lo in (("local_slots", 1), ("max_concurrency", 1), ("queue_limit", 0), ("keep_records", 1)):
            v = getattr(self, name)
            if isinstance(v, bool) or int(v) != v or v < lo:
                raise ValueError(f"{name} must be an integer >= {lo}, got {v!r}")
            setattr(self, name, int(v))
        if self.cpu_threads is not None and (int(self.cpu_threads) != self.cpu_threads or self.cpu_threads < 1):
            raise ValueError(f"cpu_threads must be an integer >= 1 (or None), got {self.cpu_threads!r}")
        for name in ("request_timeout_s", "max_upload_mb", "upstream_timeout_s"):
            v = getattr(self, name)
            if not (isinstance(v, (int, float)) and math.isfinite(v) and v > 0):
                raise ValueError(f"{name} must be a positive number, got {v!r}")
        if self.profile is not None and not os.path.exists(self.profile):
            raise ValueError(f"profile {self.profile!r} does not exist (a asrsched.service_model/1 JSON)")
        return self

    @property
    def slots(self) -> int:
        return self.max_concurrency if self.upstream else self.local_slots

    @property
    def threads_per_slot(self) -> int:
        return int(self.cpu_threads or max(1, (os.cpu_count() or 1) // self.local_slots))

    @property
    def model_names(self) -> set[str]:
        return {self.model, *self.served_model_names}
