"""The vLLM plug-in's settings: :class:`PluginConfig`, merged from vLLM's ``additional_config``, the environment and defaults.

Sources, first found wins: ``additional_config={"asrsched": {...}}`` (``--additional-config
'{"asrsched": {...}}'`` on the command line), then the environment variables of :data:`ENV_VARS`,
then the defaults. The keys and their meaning are tabulated in :mod:`asrsched.vllm_plugin.scheduler`.
A bad value raises ``ValueError`` naming the key and the allowed values when the config is built,
before the engine serves any request.
"""

from __future__ import annotations

import json
import math
import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from asrsched.core.policies import allowed_policies_text, make_queue, validate_policies
from asrsched.core.service import ServiceModel, check_kappa, default_service_model
from asrsched.core.uploads import DEFAULT_SIZING, check_sizing
from asrsched.vllm_plugin.size_estimate import check_default_language

__all__ = ["PluginConfig", "CONFIG_KEYS", "ENV_VARS", "DEFAULT_POLICY"]

ENV_VARS = {
    "policy": "ASRSCHED_POLICY",
    "policy_params": "ASRSCHED_POLICY_PARAMS",
    "service_model": "ASRSCHED_SERVICE_MODEL",
    "kappa": "ASRSCHED_KAPPA",
    "default_language": "ASRSCHED_DEFAULT_LANGUAGE",
    "unknown_duration_s": "ASRSCHED_UNKNOWN_DURATION_S",
    "admission_log": "ASRSCHED_ADMISSION_LOG",
    "step_log": "ASRSCHED_STEP_LOG",
    "policy_switch": "ASRSCHED_POLICY_SWITCH",
    "upload_sizing": "ASRSCHED_UPLOAD_SIZING",
}
CONFIG_KEYS = tuple(ENV_VARS)
DEFAULT_POLICY = "sjf"


def _json_or_value(raw: str, key: str) -> Any:
    try:
        return json.loads(raw)
    except json.JSONDecodeError:
        raise ValueError(f"{ENV_VARS[key]} must be JSON, got {raw!r}") from None


def _flag(v: Any, key: str) -> bool:
    if isinstance(v, bool):
        return v
    text = str(v).strip().lower()
    if text in ("1", "true", "yes", "on"):
        return True
    if text in ("0", "false", "no", "off"):
        return False
    raise ValueError(f"asrsched {key} must be true or false (1/0, yes/no, on/off), got {v!r}")


@dataclass(frozen=True)
class PluginConfig:
    """Settings of the scheduler plug-in (see :mod:`asrsched.vllm_plugin.scheduler` for the keys).

    ``default_language`` must be a language of ``service_model`` (one it has a kappa for): it is
    the language of a request that names none, and its kappa sizes a request whose language the
    model does not know (:class:`~asrsched.vllm_plugin.size_estimate.SizeEstimator`).
    """

    policy: str = DEFAULT_POLICY
    policy_params: Mapping[str, Any] = field(default_factory=dict)
    service_model: ServiceModel = field(default_factory=default_service_model)
    default_language: str = "en"
    unknown_duration_s: float = 30.0
    admission_log: str | None = None
    step_log: str | None = None
    policy_switch: bool = False
    upload_sizing: str = DEFAULT_SIZING

    def __post_init__(self) -> None:
        try:  # a family's name (gamma_boost_0.5, nudge_m4_1) registers itself here
            (name,) = validate_policies([self.policy])
        except ValueError as e:
            if not str(e).startswith("unknown policy"):
                raise ValueError(f"asrsched policy {self.policy!r}: {e}") from None
            raise ValueError(
                f"asrsched policy {self.policy!r} is unknown; allowed values: {allowed_policies_text()}"
            ) from None
        object.__setattr__(self, "policy", name)
        if not isinstance(self.policy_params, Mapping):
            raise ValueError(f"asrsched policy_params must be a JSON object, got {self.policy_params!r}")
        u = float(self.unknown_duration_s)
        if not (math.isfinite(u) and u > 0):
            raise ValueError(f"asrsched unknown_duration_s must be a positive number of seconds, got {u!r}")
        object.__setattr__(self, "unknown_duration_s", u)
        object.__setattr__(self, "policy_switch", _flag(self.policy_switch, "policy_switch"))
        object.__setattr__(self, "upload_sizing", check_sizing(self.upload_sizing, "asrsched upload_sizing"))
        check_default_language(self.service_model, self.default_language)
        make_queue(self.policy, **dict(self.policy_params))  # bad parameters fail now, naming themselves

    @classmethod
    def from_sources(
        cls, additional: Mapping[str, Any] | None = None, env: Mapping[str, str] | None = None
    ) -> PluginConfig:
        """Merge ``additional`` (vLLM's ``additional_config["asrsched"]``), ``env`` and defaults."""
        env = os.environ if env is None else env
        additional = dict(additional or {})
        unknown = sorted(set(additional) - set(CONFIG_KEYS))
        if unknown:
            raise ValueError(f"unknown asrsched config key(s) {', '.join(unknown)}; allowed: {', '.join(CONFIG_KEYS)}")
        raw: dict[str, Any] = {}
        for key, var in ENV_VARS.items():
            if key in additional:
                raw[key] = additional[key]
            elif env.get(var, "") != "":
                v = env[var]
                raw[key] = _json_or_value(v, key) if key in ("policy_params",) else v
        kw: dict[str, Any] = {}
        if "policy" in raw:
            kw["policy"] = raw["policy"]
        if "policy_params" in raw:
            p = raw["policy_params"]
            kw["policy_params"] = json.loads(p) if isinstance(p, str) else p
        sm = raw.get("service_model")
        if isinstance(sm, ServiceModel):
            model = sm
        elif isinstance(sm, Mapping):
            model = ServiceModel.from_dict(sm, origin="asrsched service_model")
        elif sm:
            model = ServiceModel.from_json(Path(sm))
        else:
            model = default_service_model()
        if "kappa" in raw:
            k = raw["kappa"]
            if isinstance(k, str):
                k = _json_or_value(k, "kappa")
            if isinstance(k, Mapping):
                model = model.with_kappa({str(a): check_kappa(b, f"kappa[{a!r}]") for a, b in k.items()})
            else:
                model = model.with_kappa(check_kappa(k))
        kw["service_model"] = model
        if "default_language" in raw:
            kw["default_language"] = str(raw["default_language"])
        if "unknown_duration_s" in raw:
            try:
                kw["unknown_duration_s"] = float(raw["unknown_duration_s"])
            except (TypeError, ValueError):
                raise ValueError(
                    f"asrsched unknown_duration_s must be a number of seconds, got {raw['unknown_duration_s']!r}"
                ) from None
        for key in ("admission_log", "step_log"):
            if raw.get(key):
                kw[key] = str(raw[key])
        if "policy_switch" in raw:
            kw["policy_switch"] = _flag(raw["policy_switch"], "policy_switch")
        if "upload_sizing" in raw:
            kw["upload_sizing"] = str(raw["upload_sizing"])
        return cls(**kw)
