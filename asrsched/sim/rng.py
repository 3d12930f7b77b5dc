"""Random streams a numba kernel can inline: xoshiro256++ and numpy's ziggurat exponential.

A kernel that draws through numpy's ``Generator`` (or straight through its bit generator)
pays a call through a C function pointer for every draw, which LLVM cannot inline. Here
the generator is a few lines of numba over a 4-word state array, so each draw compiles
into the kernel's own loop. On the supermarket kernel (:mod:`asrsched.abtest.model`,
5 draws per job) that made a job 10-24 % cheaper than drawing through numpy's PCG64
(``benchmarks/README.md``).

* :func:`next_u64`: xoshiro256++ (Blackman and Vigna, "Scrambled linear pseudorandom
  number generators", ACM TOMS 2021), period 2**256 - 1; it passes BigCrush and PractRand.
  ``tests/sim/test_rng.py`` checks it output for output against a plain-Python transcription
  of the authors' reference C code.
* :func:`next_double`: uniform on [0, 1), the top 53 bits (as numpy's ``random()``).
* :func:`std_exp`: standard exponential by numpy's 256-level ziggurat (numba's port
  of ``random_standard_exponential`` and its tables), the fast path inline, the rare
  rejection in :func:`_std_exp_tail`.
* :func:`state`: the 4-word state of an integer seed, by :class:`numpy.random.SeedSequence`
  (well-mixed state for any seed, even 0, 1, 2, ...; never all zeros).

The state array is updated in place: a kernel takes it as an argument and every draw
advances it, so a seed fixes the whole stream.
"""

from __future__ import annotations

import numpy as np
from numba import njit
from numba.np.random._constants import fe_double as _FE
from numba.np.random._constants import ke_double as _KE
from numba.np.random._constants import we_double as _WE
from numba.np.random._constants import ziggurat_exp_r as _ZR

_U = np.uint64


def state(seed: int) -> np.ndarray:
    """The xoshiro256++ state (4 uint64 words) of a non-negative integer ``seed``, via ``SeedSequence``."""
    if isinstance(seed, bool) or not isinstance(seed, (int, np.integer)) or seed < 0:
        raise ValueError(f"seed: need a non-negative integer, got {seed!r}")
    st = np.random.SeedSequence(int(seed)).generate_state(4, np.uint64)
    if not st.any():  # the one state xoshiro cannot leave; SeedSequence does not produce it in practice
        st[0] = 1
    return st


@njit(inline="always")
def next_u64(st):
    """The next 64-bit output of xoshiro256++ (``st``: 4 uint64 words, advanced in place)."""
    s0 = st[0]
    s1 = st[1]
    s2 = st[2]
    s3 = st[3]
    a = s0 + s3
    out = ((a << _U(23)) | (a >> _U(41))) + s0
    t = s1 << _U(17)
    s2 ^= s0
    s3 ^= s1
    s1 ^= s2
    s0 ^= s3
    s2 ^= t
    s3 = (s3 << _U(45)) | (s3 >> _U(19))
    st[0] = s0
    st[1] = s1
    st[2] = s2
    st[3] = s3
    return out


@njit(inline="always")
def next_double(st):
    """Uniform on [0, 1): the top 53 bits of :func:`next_u64` times 2**-53."""
    return np.float64(next_u64(st) >> _U(11)) * (1.0 / 9007199254740992.0)


@njit(cache=True)
def _std_exp_tail(st, idx, x):
    """The ziggurat's rare branch (base strip or wedge rejection), then fresh tries until one is accepted."""
    while True:
        if idx == 0:
            return _ZR - np.log1p(-next_double(st))
        if (_FE[idx - 1] - _FE[idx]) * next_double(st) + _FE[idx] < np.exp(-x):
            return x
        ri = next_u64(st)
        ri >>= _U(3)
        idx = np.int64(ri & _U(0xFF))
        ri >>= _U(8)
        x = np.float64(ri) * _WE[idx]
        if ri < _KE[idx]:
            return x


@njit(inline="always")
def std_exp(st):
    """A standard exponential draw (mean 1) by numpy's ziggurat; about 98.9 % of draws take the inline path."""
    ri = next_u64(st)
    ri >>= _U(3)
    idx = np.int64(ri & _U(0xFF))
    ri >>= _U(8)
    x = np.float64(ri) * _WE[idx]
    if ri < _KE[idx]:
        return x
    return _std_exp_tail(st, idx, x)


@njit(cache=True)
def raw(st, n):
    """The next ``n`` outputs of :func:`next_u64` (uint64 array)."""
    out = np.empty(n, np.uint64)
    for i in range(n):
        out[i] = next_u64(st)
    return out


@njit(cache=True)
def uniforms(st, n):
    """The next ``n`` draws of :func:`next_double`."""
    out = np.empty(n)
    for i in range(n):
        out[i] = next_double(st)
    return out


@njit(cache=True)
def exponentials(st, n):
    """The next ``n`` draws of :func:`std_exp`."""
    out = np.empty(n)
    for i in range(n):
        out[i] = std_exp(st)
    return out
