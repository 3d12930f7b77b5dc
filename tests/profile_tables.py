"""Synthetic profiler measurement tables with known truth (importable by name: ``tests`` is on pytest's
pythonpath), for the profiler's fit tests and the profiling figures' layout test."""

import numpy as np
import pandas as pd

#: the per-window encoder cost, per-token step and per-request overhead the tables are drawn from (s)
TRUE = dict(enc=0.47, step=0.011, over=0.05)


def synthetic(kappas=None, n=40, seed=0, noise=True):
    """Rows like the profiler's: Poisson tokens around kappa*d, time = windows*enc + tokens*step + overhead."""
    kappas = kappas or {"en": 4.0, "es": 5.5}
    rng = np.random.default_rng(seed)
    rows = []
    for lang, k in kappas.items():
        d = rng.uniform(2, 55, n)
        tok = rng.poisson(k * d) if noise else np.rint(k * d)
        w = np.maximum(1, np.ceil(d / 30))
        enc = w * TRUE["enc"] * (rng.normal(1, 0.03, n) if noise else 1)
        tot = enc + tok * TRUE["step"] + TRUE["over"] + (rng.normal(0, 0.01, n) if noise else 0)
        for i in range(n):
            rows.append(
                dict(
                    utt_id=f"{lang}{i}",
                    key=f"{lang}{i}",
                    language=lang,
                    ok=True,
                    silence=False,
                    audio_s=d[i],
                    speech_s=d[i],
                    vad_silero_s=d[i],
                    vad_energy_s=d[i],
                    vad_silero_cost_s=0.01,
                    vad_energy_cost_s=0.001,
                    windows=w[i],
                    windows_nominal=w[i],
                    decode_steps=tok[i],
                    tokens_generated=tok[i],
                    tokens_kept=tok[i],
                    tokens_text=tok[i],
                    encode_s=enc[i],
                    decode_s=tok[i] * TRUE["step"],
                    total_s=tot[i],
                    cpu_s=1.5 * tot[i],
                    encode_cpu_s=1.5 * enc[i],
                    decode_cpu_s=1.5 * tok[i] * TRUE["step"],
                )
            )
    return pd.DataFrame(rows)
