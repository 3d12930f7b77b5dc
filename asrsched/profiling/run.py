"""Profile real Whisper end to end: corpus, measurement, fits, output folder, CLI; the shipped profiles.

Pipeline (each step usable alone)::

    manifest (asrsched.whisper.corpus.build_corpus, or any table with path/language/text)
      -> measure(manifest, backend, out="run.csv")      one row per request, written as it goes
      -> fit_kappa(train)                              tokens = kappa x duration, outliers out, bootstrap CI
      -> fit_service_model(train, kappa)               windows x enc + tokens x step + overhead
      -> validate_holdout(model, held)                 simulator vs measured mean service time
      -> silence_estimates(rows, model)                file duration vs VAD speech duration

:func:`~asrsched.profiling.measure.measure` and the measurement columns are in
:mod:`asrsched.profiling.measure`; the fits, the hold-out check and the VAD comparison
in :mod:`asrsched.profiling.fit`. :func:`fit_profile` here does every fit of one run (a :class:`ProfileRun`;
:func:`refit` again from a saved run folder), :func:`run_profile` measures and fits and writes the run folder; ``python -m asrsched.profiling.run --help`` is the CLI.
:func:`packaged_profile` loads a profile shipped with the package.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from asrsched.core.service import ServiceModel
from asrsched.profiling.checks import check_profile
from asrsched.profiling.fit import (
    KappaFit,
    fit_kappa,
    fit_service_model,
    silence_estimates,
    split_holdout,
    vad_summary,
    validate_holdout,
)
from asrsched.profiling.measure import CLOCKS, TOKEN_COLUMNS, measure, typed_measurements
from asrsched.profiling.outliers import MIN_SPREAD, OUTLIER_Z, check_rule
from asrsched.whisper.audio import load_audio

__all__ = [
    "ProfileRun",
    "fit_profile",
    "refit",
    "run_profile",
    "packaged_profile",
    "PACKAGED_PROFILES",
    "main",
]


# --------------------------------------------------------------------------- the whole fit


@dataclass
class ProfileRun:
    """Everything one profiling run produced (see :func:`fit_profile` and
    :func:`asrsched.profiling.run.run_profile`)."""

    measurements: pd.DataFrame
    train: pd.DataFrame
    held: pd.DataFrame
    kappa: KappaFit
    kappa_tables: dict[str, KappaFit]
    service_model: ServiceModel
    holdout: dict
    holdout_measured_tokens: dict
    batch: pd.DataFrame
    estimates: pd.DataFrame
    vad: pd.DataFrame
    params: dict
    timings: dict = field(default_factory=dict)
    out_dir: Path | None = None

    def kappa_table(self) -> pd.DataFrame:
        """kappa per language for every token definition (one row per language x tokens)."""
        return pd.concat([k.table for k in self.kappa_tables.values()], ignore_index=True)

    def report(self) -> str:
        """The run's findings in a few lines: kappa, the time model, the held-back check, VAD, timings."""
        sm, out = self.service_model, []
        out.append(self.kappa.summary())
        kept = self.kappa_tables.get("tokens_kept")
        if kept is not None and kept is not self.kappa:
            out.append(
                "  transcript tokens per s: "
                + ", ".join(
                    f"{r.language} {r.kappa:.2f} [{r.ci_low:.2f}, {r.ci_high:.2f}]" for r in kept.table.itertuples()
                )
            )
        out.append(
            f"service model {sm.name}: encode {sm.encode_s_per_window:.3f} s/window, decode "
            f"{1000 * sm.decode_s_per_token:.2f} ms/token, overhead {sm.overhead_s:.3f} s, batch slope "
            f"{sm.decode_batch_slope:.3f}; R2 of total time {sm.fit.get('r2_total_s_measured_tokens', float('nan')):.3f}"
        )
        if self.holdout:
            h, hm = self.holdout, self.holdout_measured_tokens
            out.append(
                f"held-back mean service time (n={h['n']}): measured {h['measured_mean_s']:.3f} s, "
                f"predicted {h['predicted_mean_s']:.3f} s from kappa x duration ({100 * h['rel_error']:+.1f} %), "
                f"{hm['predicted_mean_s']:.3f} s from measured tokens ({100 * hm['rel_error']:+.1f} %) "
                f"[{h['method']}]"
            )
        oc = sm.fit.get("other_clock") or {}
        if oc:
            out.append(
                f"  on the {oc['clock']} clock: encode {oc['encode_s_per_window']:.3f} s/window, decode "
                f"{1000 * oc['decode_s_per_token']:.2f} ms/token, overhead {oc['overhead_s']:.3f} s, R2 "
                f"{oc['r2_total_measured_tokens']:.3f}; held-back mean {oc['holdout']['measured_mean_s']:.3f} s "
                f"measured vs {oc['holdout']['predicted_mean_s']:.3f} s predicted "
                f"({100 * oc['holdout']['rel_error']:+.1f} %)"
            )
        v = self.vad
        if len(v) and v["silence"].any():
            s = v[v["silence"]].set_index("duration_source")
            parts = [
                f"{e}: tokens {100 * s.loc[e, 'tokens_median_ae']:.0f} %, time {100 * s.loc[e, 'time_median_ae']:.0f} %"
                for e in s.index
            ]
            out.append(f"silence clips (n={int(s['n'].iloc[0])}), median |error|: " + "; ".join(parts))
            for e in ("silero VAD", "energy VAD"):
                if e in s.index:
                    out.append(
                        f"  {e} cost {s.loc[e, 'cost_ms']:.1f} ms/request = "
                        f"{100 * s.loc[e, 'cost_fraction']:.2f} % of inference ({s.loc[e, 'inference_ms']:.0f} ms)"
                    )
        m = self.measurements
        nf = int((~m["ok"]).sum())
        if nf:
            out.append(
                f"failed rows: {nf} ({', '.join(f'{k}: {v}' for k, v in m.loc[~m['ok'], 'error_reason'].value_counts().items())}); fits used the rest"
            )
        if self.timings:
            out.append("timings (s): " + ", ".join(f"{k} {v:.1f}" for k, v in self.timings.items()))
        return "\n".join(out)

    def save(self, out_dir: str | os.PathLike) -> dict[str, Path]:
        """Write the service-model JSON, kappa table, VAD summary and run parameters into ``out_dir``."""
        d = Path(out_dir)
        d.mkdir(parents=True, exist_ok=True)
        paths = {
            "service_model": self.service_model.to_json(d / "service_model.json"),
            "kappa": d / "kappa.csv",
            "vad": d / "vad_summary.csv",
            "params": d / "params.json",
        }
        self.kappa_table().to_csv(paths["kappa"], index=False)
        if len(self.batch):
            paths["batch"] = d / "batch.csv"
            self.batch.to_csv(paths["batch"], index=False)
        self.vad.to_csv(paths["vad"], index=False)
        paths["params"].write_text(
            json.dumps(
                {
                    **self.params,
                    "timings": self.timings,
                    "holdout": {k: v for k, v in self.holdout.items() if k != "predicted"},
                },
                indent=2,
                default=str,
            )
            + "\n"
        )
        return paths


def fit_profile(
    meas: pd.DataFrame,
    *,
    batch: pd.DataFrame | Sequence[dict] | None = None,
    name: str = "profiled",
    params: dict | None = None,
    clock: str = "cpu",
    holdout_frac: float = 0.25,
    kappa_tokens: str = "decode_steps",
    n_boot: int = 2000,
    seed: int = 0,
    extra_fit: dict | None = None,
    outlier_z: float | None = OUTLIER_Z,
) -> ProfileRun:
    """The fitting half of :func:`asrsched.profiling.run.run_profile`, on a measurement table already made.

    Clean (no inserted silence) rows are split into train / held-back per language;
    kappa is fitted for every token definition, the :class:`ServiceModel` on ``clock``
    (the other clock's fit and hold-out check go into ``fit["other_clock"]``), the
    hold-out is predicted through the simulator, and the silence clips are sized
    with and without VAD. kappa leaves out the clips of the outlier rule with threshold ``outlier_z``
    (:mod:`asrsched.profiling.outliers`; ``None``: none left out); the time model is fitted on the
    measured tokens of every training clip. Use it to re-fit a saved run (:func:`refit`).
    """
    if clock not in CLOCKS:
        raise ValueError(f"clock must be one of {', '.join(CLOCKS)}; got {clock!r}")
    if kappa_tokens not in TOKEN_COLUMNS:
        raise ValueError(f"kappa_tokens must be one of {', '.join(TOKEN_COLUMNS)}; got {kappa_tokens!r}")
    check_rule(outlier_z, MIN_SPREAD)
    params = dict(params or {})
    meas = typed_measurements(meas)
    batch = pd.DataFrame(batch if batch is not None else [], columns=None)
    # failed rows stay in, so the fits count them as dropped
    fit_rows = meas[~meas["silence"] | ~meas["ok"]]
    train, held = split_holdout(fit_rows, holdout_frac, seed=seed)
    kappas = {t: fit_kappa(train, tokens=t, n_boot=n_boot, seed=seed, outlier_z=outlier_z) for t in TOKEN_COLUMNS}
    kfit = kappas[kappa_tokens]
    extra = {
        "kappa_tables": {t: k.table.to_dict("records") for t, k in kappas.items()},
        "kappa_outliers": kfit.outliers.drop(columns="row").to_dict("records"),
        "kappa_outlier_rule": kfit.rule,
        "n_failed_rows": int((~meas["ok"]).sum()),
        "failed_reasons": meas.loc[~meas["ok"], "error_reason"].value_counts().to_dict(),
        **(extra_fit or {}),
    }
    src = (
        f"asrsched.profiling.run.run_profile({json.dumps(params, default=str)})"
        if params
        else "asrsched.profiling.run.fit_profile"
    )
    sm = fit_service_model(train, kfit, name=name, batch=batch, source=src, clock=clock, extra_fit=extra)
    hold = validate_holdout(sm, held) if len(held) else {}
    hold_m = validate_holdout(sm, held, tokens=kappa_tokens) if len(held) else {}
    other = {}
    oc = "cpu" if clock == "wall" else "wall"
    ok_rows = train[train["ok"].astype(bool)]
    if len(held) and len(ok_rows) and ok_rows[list(CLOCKS[oc][:2])].notna().all().all():
        so = fit_service_model(train, kfit, name=name, batch=batch, clock=oc)
        ho = validate_holdout(so, held)
        other = {
            "clock": oc,
            "encode_s_per_window": so.encode_s_per_window,
            "decode_s_per_token": so.decode_s_per_token,
            "overhead_s": so.overhead_s,
            "window_s": so.window_s,
            "r2_total_measured_tokens": so.fit["r2_total_s_measured_tokens"],
            "holdout": {k: v for k, v in ho.items() if k not in ("predicted", "per_language")},
        }
    sm = ServiceModel.from_dict(
        {
            **sm.to_dict(),
            "fit": {
                **sm.fit,
                "holdout": {k: v for k, v in hold.items() if k != "predicted"},
                "holdout_measured_tokens": {k: v for k, v in hold_m.items() if k != "predicted"},
                "other_clock": other,
            },
        }
    )
    est = silence_estimates(meas, sm)
    vad = vad_summary(est)
    return ProfileRun(meas, train, held, kfit, kappas, sm, hold, hold_m, batch, est, vad, params, {}, None)


def refit(run_dir: str | os.PathLike, **kw) -> ProfileRun:
    """Re-fit a saved run folder (``measurements.csv`` + ``service_model.json`` or ``batch.csv``)
    without measuring again; keyword arguments go to :func:`fit_profile` (defaults: the saved
    run's name, parameters and clock)."""
    d = Path(run_dir)
    if not (d / "measurements.csv").exists():
        raise FileNotFoundError(f"{d} holds no measurements.csv (a run_profile output folder is needed)")
    meas = pd.read_csv(d / "measurements.csv")
    old = ServiceModel.from_json(d / "service_model.json") if (d / "service_model.json").exists() else None
    params = json.loads((d / "params.json").read_text()) if (d / "params.json").exists() else {}
    params.pop("timings", None)
    params.pop("holdout", None)
    batch = (
        pd.read_csv(d / "batch.csv")
        if (d / "batch.csv").exists()
        else pd.DataFrame(old.fit.get("batch_step", []))
        if old
        else None
    )
    kw.setdefault("batch", batch)
    kw.setdefault("params", params)
    kw.setdefault("name", old.name.removesuffix("/cpu-time") if old else "profiled")
    kw.setdefault("clock", (old.fit.get("clock") if old else None) or params.get("clock", "cpu"))
    for k in ("holdout_frac", "kappa_tokens", "seed", "outlier_z"):
        if k in params:
            kw.setdefault(k, params[k])
    if old and "machine" in old.fit:
        kw.setdefault("extra_fit", {"machine": old.fit["machine"]})
    run = fit_profile(meas, **kw)
    run.out_dir = d
    return run


#: the profiles measured here and shipped with the package (see each JSON's ``source`` and ``fit``)
PACKAGED_PROFILES = {"tiny.en": "profile_tiny_en_cpu.json", "base": "profile_base_cpu.json"}


def packaged_profile(model: str = "tiny.en") -> ServiceModel:
    """The :class:`ServiceModel` measured on this project's 2-core CPU machines for ``model``
    (faster-whisper, int8, greedy; CPU-time clock), shipped in ``asrsched/data``.

    >>> packaged_profile("tiny.en").kappa_for("en") > 2
    True
    """
    from importlib import resources

    if model not in PACKAGED_PROFILES:
        raise ValueError(f"no packaged profile for {model!r}; allowed values: {', '.join(PACKAGED_PROFILES)}")
    with resources.as_file(resources.files("asrsched.data") / PACKAGED_PROFILES[model]) as p:
        return ServiceModel.from_json(p)


# --------------------------------------------------------------------------- the whole run
def run_profile(
    *,
    model: str = "tiny.en",
    backend: str | Any = "faster-whisper",
    languages: Sequence[str] = ("en",),
    n_per_language: int = 16,
    n_silence_per_language: int = 3,
    silence: dict | None = None,
    beam_size: int = 1,
    temperature_fallback: bool = False,
    compute_type: str = "int8",
    cpu_threads: int = 2,
    batch_sizes: Sequence[int] = (1, 2, 4),
    holdout_frac: float = 0.25,
    kappa_tokens: str = "decode_steps",
    sample: str = "stratified",
    max_s: float = 35.0,
    seed: int = 0,
    n_boot: int = 2000,
    out_dir: str | os.PathLike | None = None,
    extra_files: Sequence[str | os.PathLike] = (),
    resume: bool = True,
    cache: str | os.PathLike | None = None,
    repeats: int = 1,
    clock: str = "auto",
    progress: bool = True,
    outlier_z: float | None = OUTLIER_Z,
) -> ProfileRun:
    """Synthesise a corpus, measure it on a real backend, fit kappa and the ServiceModel, validate.

    ``n_per_language`` clean clips per language feed the fits (``holdout_frac`` of
    them held back for validation); ``n_silence_per_language`` more clips with
    inserted silence (``silence``: :class:`~asrsched.whisper.corpus.SilenceSpec` fields,
    default 2 s lead, 3 s trail, two 2 s inner pauses) are measured for the VAD
    comparison only. ``extra_files`` (paths, language taken from ``languages[0]``)
    are measured too — corrupt ones become failed rows. ``batch_sizes`` () skips
    the batched-decode timing. ``temperature_fallback=False`` (default) decodes
    once at temperature 0, as vLLM's transcription endpoint (the study's engine)
    does; ``True`` keeps faster-whisper's fallback ladder 0.0-1.0, whose re-decodes
    (``fallbacks``, ``tokens_generated``) make a few clips many times dearer. ``backend`` is a name from
    :data:`asrsched.profiling.measure.BACKENDS` or a ready backend object. With ``out_dir``
    the measurements go to ``out_dir/<model>-<backend>-<set-up hash>/measurements.csv``
    as they are made (a rerun with the same set-up resumes; another set-up gets its own
    folder) and the fits beside them (``ProfileRun.out_dir``). ``cache``: corpus cache folder (default ``$ASRSCHED_CACHE``
    or ``~/.cache/asrsched``). ``repeats``: transcriptions per clip, the fastest kept
    (use 3 on a shared machine). ``clock``: ``"cpu"`` (process CPU seconds,
    which other load on a shared machine barely moves; ~ wall time on one dedicated
    core), ``"wall"``, or ``"auto"`` (default: ``cpu`` for an engine on the CPU,
    ``wall`` on a GPU; see :func:`~asrsched.profiling.fit.fit_service_model`); the other clock's fit and hold-out check go into
    ``service_model.fit["other_clock"]`` when the backend reports both. ``outlier_z``: the kappa fit's
    outlier threshold (:func:`fit_profile`).
    """
    from asrsched.profiling.measure import make_backend
    from asrsched.whisper.corpus import build_corpus

    languages, sil = check_profile(  # ---- everything validated before any work
        model=model,
        backend=backend,
        languages=languages,
        n_per_language=n_per_language,
        n_silence_per_language=n_silence_per_language,
        silence=silence,
        clock=clock,
        kappa_tokens=kappa_tokens,
        repeats=repeats,
        outlier_z=outlier_z,
        extra_files=extra_files,
    )
    params = dict(
        model=model,
        backend=backend if isinstance(backend, str) else getattr(backend, "name", "?"),
        languages=languages,
        n_per_language=n_per_language,
        n_silence_per_language=n_silence_per_language,
        silence=sil.__dict__,
        beam_size=beam_size,
        temperature_fallback=bool(temperature_fallback),
        compute_type=compute_type,
        cpu_threads=cpu_threads,
        batch_sizes=list(batch_sizes),
        holdout_frac=holdout_frac,
        kappa_tokens=kappa_tokens,
        sample=sample,
        max_s=max_s,
        seed=seed,
        repeats=repeats,
        clock=clock,
        outlier_z=outlier_z,
    )
    timings: dict[str, float] = {}
    load0 = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
    t0 = time.perf_counter()
    clean = build_corpus(
        languages, n_per_language, seed=seed, sample=sample, max_s=max_s, cache=cache, progress=progress
    )
    parts = [clean]
    if n_silence_per_language:
        parts.append(
            build_corpus(
                languages,
                n_silence_per_language,
                seed=seed + 1,
                sample="random",
                max_s=min(max_s, 15.0),
                silence=sil,
                cache=cache,
                progress=progress,
            )
        )
    if extra_files:
        parts.append(
            pd.DataFrame(
                {
                    "path": [str(p) for p in extra_files],
                    "language": languages[0],
                    "utt_id": [Path(p).name for p in extra_files],
                    "key": [f"extra-{Path(p).name}" for p in extra_files],
                }
            )
        )
    manifest = pd.concat(parts, ignore_index=True)
    # measure in a seeded random order, so slow drifts of machine load do not line up with
    # language or duration
    manifest = manifest.iloc[np.random.default_rng(seed).permutation(len(manifest))].reset_index(drop=True)
    timings["corpus_s"] = time.perf_counter() - t0

    t1 = time.perf_counter()
    if isinstance(backend, str):
        kw = dict(beam_size=beam_size, compute_type=compute_type, cpu_threads=cpu_threads)
        if backend == "faster-whisper":
            kw["temperature"] = (0.0, 0.2, 0.4, 0.6, 0.8, 1.0) if temperature_fallback else 0.0
        be = make_backend(backend, model, **kw)
    else:
        be = backend
    timings["load_model_s"] = time.perf_counter() - t1
    if clock == "auto":  # GPU engines are timed on the wall clock, CPU engines on CPU time
        clock = "wall" if "/gpu" in str(getattr(be, "description", "")) else "cpu"
        params["clock"] = clock
    run_dir = None
    if out_dir is not None:  # one sub-folder per measurement set-up: resuming never mixes set-ups
        import hashlib

        setup = dict(
            backend=getattr(be, "description", params["backend"]),
            model=model,
            beam_size=beam_size,
            temperature_fallback=bool(temperature_fallback),
            compute_type=compute_type,
            cpu_threads=cpu_threads,
            repeats=repeats,
        )
        h = hashlib.sha1(json.dumps(setup, sort_keys=True, default=str).encode()).hexdigest()[:8]
        run_dir = Path(out_dir) / f"{model}-{params['backend']}-{h}"
    out = run_dir / "measurements.csv" if run_dir is not None else None
    t2 = time.perf_counter()
    meas = measure(manifest, be, out=out, resume=resume, repeats=repeats, progress=progress)
    timings["measure_s"] = time.perf_counter() - t2
    batch = pd.DataFrame(columns=["batch", "step_s", "steps"])
    if batch_sizes and hasattr(be, "batch_step_times"):
        t3 = time.perf_counter()
        good = meas[meas["ok"] & ~meas["silence"]].sort_values("audio_s")
        clips = [load_audio(p) for p in good["path"].tail(4)]
        if clips:
            batch = pd.DataFrame(be.batch_step_times(clips, str(good["language"].iloc[-1]), tuple(batch_sizes)))
        timings["batch_s"] = time.perf_counter() - t3

    desc = getattr(be, "description", f"whisper-{model}/{params['backend']}")
    machine = {
        "cpus": os.cpu_count(),
        "load_avg_1min_start": load0,
        "load_avg_1min_end": os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan"),
    }
    run = fit_profile(
        meas,
        batch=batch,
        name=desc,
        params=params,
        clock=clock,
        holdout_frac=holdout_frac,
        kappa_tokens=kappa_tokens,
        n_boot=n_boot,
        seed=seed,
        extra_fit={"machine": machine},
        outlier_z=outlier_z,
    )
    timings["total_s"] = time.perf_counter() - t0
    run.timings = timings
    run.out_dir = run_dir
    if run_dir is not None:
        run.save(run_dir)
    return run


# --------------------------------------------------------------------------- CLI
def main(argv: Sequence[str] | None = None) -> int:
    """``python -m asrsched.profiling.run``: profile a model and write its ServiceModel JSON."""
    p = argparse.ArgumentParser(prog="python -m asrsched.profiling.run", description=main.__doc__)
    p.add_argument("--model", default="tiny.en", help="tiny.en or base")
    p.add_argument("--backend", default="faster-whisper", help="faster-whisper or vllm")
    p.add_argument("--languages", default="en", help="comma-separated: en,es,de,id")
    p.add_argument("--n", type=int, default=16, help="clean clips per language")
    p.add_argument("--n-silence", type=int, default=3, help="clips with inserted silence per language")
    p.add_argument("--beam-size", type=int, default=1)
    p.add_argument("--fallback", action="store_true", help="keep faster-whisper's temperature-fallback ladder")
    p.add_argument("--compute-type", default="int8")
    p.add_argument("--cpu-threads", type=int, default=2)
    p.add_argument("--batch-sizes", default="1,2,4", help="batched-decode timing ('' to skip)")
    p.add_argument("--holdout", type=float, default=0.25)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--repeats", type=int, default=1, help="transcriptions per clip; the fastest is kept")
    p.add_argument("--clock", default="auto", help="cpu, wall or auto (cpu on a CPU engine, wall on a GPU)")
    p.add_argument("--out-dir", default="runs/profile", help="a sub-folder per set-up with measurements and fits")
    p.add_argument("--out", default=None, help="also write the ServiceModel JSON here")
    p.add_argument(
        "--refit",
        default=None,
        metavar="RUN_DIR",
        help="re-fit a saved run folder instead of measuring (writes its fits back there)",
    )
    a = p.parse_args(argv)
    if a.refit:
        run = refit(a.refit, **({} if a.clock == "auto" else {"clock": a.clock}))
        run.save(a.refit)
        if a.out:
            run.service_model.to_json(a.out)
        print(run.report())
        return 0
    run = run_profile(
        model=a.model,
        backend=a.backend,
        languages=[s for s in a.languages.split(",") if s],
        n_per_language=a.n,
        n_silence_per_language=a.n_silence,
        beam_size=a.beam_size,
        temperature_fallback=a.fallback,
        compute_type=a.compute_type,
        cpu_threads=a.cpu_threads,
        batch_sizes=[int(b) for b in a.batch_sizes.split(",") if b],
        holdout_frac=a.holdout,
        seed=a.seed,
        repeats=a.repeats,
        clock=a.clock,
        out_dir=a.out_dir,
    )
    if a.out:
        run.service_model.to_json(a.out)
    print(run.report())
    print(f"measurements and fits: {run.out_dir}")
    if len(run.vad):
        print(run.vad.to_string(index=False, float_format=lambda v: f"{v:.3f}"))
    return 0


if __name__ == "__main__":
    sys.exit(main())
