"""Hypothesis strategies that draw attention problems, and make_problem() that builds one.

A problem is drawn as a small dict of parameters (shapes, options, dtype, layout, value
distribution, seed): Hypothesis shrinks the parameters, and make_problem(**params) rebuilds the
arrays from them deterministically, so a failing case prints as one line you can paste back.
"""
from __future__ import annotations

import dataclasses
from typing import Any, Callable

import numpy as np

try:
    import ml_dtypes

    _BF16 = np.dtype(ml_dtypes.bfloat16)
except ImportError:  # pragma: no cover
    _BF16 = None

DTYPES = ("f32", "f16", "bf16")
LAYOUTS = ("bshd", "bhsd", "padded")
VALUES = ("normal", "uniform", "large", "spiky")


def np_dtype(name: str) -> np.dtype:
    return {"f32": np.dtype(np.float32), "f16": np.dtype(np.float16), "bf16": _BF16}[name]


@dataclasses.dataclass(frozen=True)
class Supports:
    """What the implementation under test supports; the strategy draws only such problems.

    Options are passed to the implementation under flashattn.forward's keyword names, and only
    when used: causal, window=(left, right) (bottom-right aligned: row i sees keys
    i + Nk - Nq - left ... i + Nk - Nq + right), scale, softcap, alibi_slopes ([Hq] float32, bias
    -slope·|i + Nk - Nq - j|), seqlens_k ([B] int32), cu_seqlens_q / cu_seqlens_k (varlen: q, k, v
    are rank 3 [total, H, d])."""
    dtypes: tuple[str, ...] = DTYPES
    layouts: tuple[str, ...] = LAYOUTS  # bshd contiguous, a bhsd buffer viewed as bshd, padded heads
    values: tuple[str, ...] = VALUES  # normal, uniform, large (|S| ~ 1e3), spiky (a few large entries)
    head_dims: tuple[int, ...] = (1, 8, 16, 32, 64)
    max_seqlen: int = 48
    max_batch: int = 3
    gqa: bool = True  # Hk < Hq (Hq % Hk == 0)
    dv: bool = True  # value head dim different from d
    causal: bool = True
    window: bool = True  # sliding windows (with or without causal)
    cross_lengths: bool = True  # Nq != Nk
    empty_rows: bool = True  # rows that see no key (out = 0, lse = -inf), empty sequences
    scale: bool = True  # a scale other than 1/sqrt(d), drawn from `scales`
    scales: tuple[float, ...] = (0.5, 1.0, 2.0, -0.3, 0.0)  # negative and 0 are valid scales too
    softcap: bool = True
    alibi: bool = True
    seqlens_k: bool = True
    varlen: bool = True
    backward: bool = True  # set by check_attention: whether dout is drawn
    accept: Callable[[dict[str, Any]], bool] | None = None  # a last filter on the parameters


def visible_counts(nq: int, nk: int, causal: bool, left: int, right: int, offset: int = 0) -> np.ndarray:
    """Keys each query row sees under flashattn's bottom-right aligned mask (docs/semantics.md)."""
    i = np.arange(nq)[:, None]
    j = np.arange(nk)[None, :]
    diag = i + nk - nq + offset
    ok = np.ones((nq, nk), bool)
    r = 0 if causal else right  # causal is the window (-1, 0); the strategy never combines it with right
    if r >= 0:
        ok &= j <= diag + r
    if left >= 0:
        ok &= j >= diag - left
    return ok.sum(axis=1)


def _has_empty_row(p: dict[str, Any]) -> bool:
    for s in range(len(p["nq"])):
        nq, nk = p["nq"][s], p["nk"][s]
        if p["seqlens_k"] is not None:
            nk = p["seqlens_k"][s]
        if nq == 0:
            return True
        if (visible_counts(nq, nk, p["causal"], p["window"][0], p["window"][1]) == 0).any():
            return True
    return False


@dataclasses.dataclass
class Problem:
    """One drawn attention problem: arrays (numpy) and the options to call with."""
    params: dict[str, Any]
    q: np.ndarray
    k: np.ndarray
    v: np.ndarray
    dout: np.ndarray | None
    options: dict[str, Any]

    def __repr__(self) -> str:
        return "make_problem(" + ", ".join(f"{k}={v!r}" for k, v in self.params.items()) + ")"

    @property
    def dtype(self) -> str:
        return self.params["dtype"]


def _values(rng: np.random.Generator, kind: str, shape: tuple[int, ...], d: int) -> np.ndarray:
    if kind == "uniform":
        return rng.uniform(-1, 1, shape)
    if kind == "large":  # |q·k| * scale ~ 1e3 with the default scale
        return rng.normal(0, 31.6, shape)
    if kind == "spiky":
        x = rng.normal(0, 0.3, shape)
        hit = rng.random(shape) < 0.03
        x[hit] = rng.normal(0, 8, hit.sum())
        return x
    return rng.normal(0, 1, shape)


def _layout(x: np.ndarray, layout: str, dtype: np.dtype) -> np.ndarray:
    """x [B, N, H, d] (or [N, H, d]) in `layout`, as a strided view of a fresh buffer."""
    x = x.astype(np.float32).astype(dtype)
    if layout == "bhsd":
        t = np.ascontiguousarray(np.swapaxes(x, -3, -2))
        return np.swapaxes(t, -3, -2)
    if layout == "padded":  # each head row padded by 3 elements (head stride d + 3)
        buf = np.zeros(x.shape[:-1] + (x.shape[-1] + 3,), dtype)
        buf[..., : x.shape[-1]] = x
        return buf[..., : x.shape[-1]]
    return np.ascontiguousarray(x)


def make_problem(*, dtype: str, layout: str, values: str, seed: int, nq: list[int], nk: list[int], hq: int,
                 hk: int, d: int, dv: int, causal: bool, window: tuple[int, int], scale: float | None,
                 softcap: float, alibi: bool, seqlens_k: list[int] | None, varlen: bool,
                 backward: bool = True) -> Problem:
    """Builds the problem the parameters describe (the repr of a Problem calls this)."""
    params = dict(dtype=dtype, layout=layout, values=values, seed=seed, nq=nq, nk=nk, hq=hq, hk=hk, d=d, dv=dv,
                  causal=causal, window=window, scale=scale, softcap=softcap, alibi=alibi, seqlens_k=seqlens_k,
                  varlen=varlen, backward=backward)
    rng = np.random.default_rng(seed)
    t = np_dtype(dtype)
    b = len(nq)
    if varlen:
        sq, sk = (sum(nq),), (sum(nk),)
    else:
        sq, sk = (b, nq[0]), (b, nk[0])
    q = _layout(_values(rng, values, sq + (hq, d), d), layout, t)
    k = _layout(_values(rng, values, sk + (hk, d), d), layout, t)
    v = _layout(_values(rng, "normal" if values == "large" else values, sk + (hk, dv), dv), layout, t)
    dout = _layout(rng.normal(0, 1, sq + (hq, dv)), "bshd", t) if backward else None
    options: dict[str, Any] = {}
    if causal:
        options["causal"] = True
    if window != (-1, -1):
        options["window"] = tuple(window)
    if scale is not None:
        options["scale"] = float(scale)
    if softcap:
        options["softcap"] = float(softcap)
    if alibi:
        options["alibi_slopes"] = (2.0 ** (-8.0 * (np.arange(hq) + 1) / hq)).astype(np.float32)
    if seqlens_k is not None:
        options["seqlens_k"] = np.asarray(seqlens_k, np.int32)
    if varlen:
        options["cu_seqlens_q"] = np.concatenate([[0], np.cumsum(nq)]).astype(np.int32)
        options["cu_seqlens_k"] = np.concatenate([[0], np.cumsum(nk)]).astype(np.int32)
    return Problem(params, q, k, v, dout, options)


def attention_problem_params(supports: Supports = Supports()):
    """A strategy of make_problem's parameters for an implementation that supports `supports`."""
    from hypothesis import assume
    from hypothesis import strategies as st

    s = supports

    @st.composite
    def draw_params(draw) -> dict[str, Any]:
        varlen = s.varlen and draw(st.booleans())
        b = draw(st.integers(1, s.max_batch))
        lo = 0 if s.empty_rows else 1
        if varlen:
            nq = [draw(st.integers(lo, s.max_seqlen)) for _ in range(b)]
            nk = nq if not s.cross_lengths else [draw(st.integers(lo, s.max_seqlen)) for _ in range(b)]
        else:
            n = draw(st.integers(lo, s.max_seqlen))
            m = draw(st.one_of(st.just(n), st.integers(lo, s.max_seqlen))) if s.cross_lengths else n
            nq, nk = [n] * b, [m] * b
        hk = draw(st.integers(1, 3))
        hq = hk * (draw(st.integers(1, 3)) if s.gqa else 1)
        d = draw(st.sampled_from(s.head_dims))
        dv = draw(st.sampled_from(s.head_dims)) if s.dv and draw(st.booleans()) else d
        causal = s.causal and draw(st.booleans())
        window = (-1, -1)
        if s.window and draw(st.booleans()):
            window = (draw(st.integers(-1, 8)), -1 if causal else draw(st.integers(-1, 8)))
        scale = None
        if s.scale and draw(st.booleans()):
            scale = draw(st.sampled_from(s.scales))
        softcap = draw(st.sampled_from([0.0, 5.0, 30.0])) if s.softcap else 0.0
        alibi = s.alibi and draw(st.booleans())
        seqlens_k = None
        if s.seqlens_k and draw(st.booleans()):
            seqlens_k = [draw(st.integers(lo, m_)) for m_ in nk]
        p = dict(dtype=draw(st.sampled_from(s.dtypes)), layout=draw(st.sampled_from(s.layouts)),
                 values=draw(st.sampled_from(s.values)), seed=draw(st.integers(0, 2**32 - 1)), nq=nq, nk=nk, hq=hq,
                 hk=hk, d=d, dv=dv, causal=causal, window=window, scale=scale, softcap=softcap, alibi=alibi,
                 seqlens_k=seqlens_k, varlen=varlen, backward=s.backward)
        if not s.empty_rows:
            assume(not _has_empty_row(p))
        if s.accept is not None:
            assume(s.accept(p))
        return p

    return draw_params()


def attention_problems(supports: Supports = Supports()):
    """A strategy of Problems (arrays built by make_problem from drawn parameters)."""
    return attention_problem_params(supports).map(lambda p: make_problem(**p))
