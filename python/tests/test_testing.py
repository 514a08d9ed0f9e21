"""flashattn.testing on kernels nobody here wrote: a naive numpy kernel passes, the same kernel with
a planted bug is caught and shrunk to a small case; assert_close's message; the oracle."""
from __future__ import annotations

import numpy as np
import pytest

import flashattn
import naive
from flashattn.testing import (AttentionCheckFailed, AttentionMismatch, Supports, assert_close, check_attention,
                               make_problem, reference)

pytestmark = pytest.mark.filterwarnings("ignore::RuntimeWarning")  # the planted overflow bug

NAIVE = Supports(softcap=False, alibi=False, seqlens_k=False, varlen=False, scale=True)


def test_naive_kernel_passes():
    assert check_attention(naive.attention, supports=NAIVE, max_examples=150) == 150


def test_top_left_causal_bug_is_caught_and_shrunk():
    with pytest.raises(AttentionCheckFailed) as e:
        check_attention(lambda q, k, v, **o: naive.attention(q, k, v, causal_top_left=True, **o), supports=NAIVE,
                        max_examples=200)
    p = e.value.problem.params
    # the bug only shows with a causal mask and Nq != Nk; shrinking reaches a small such case
    assert p["causal"] and p["nq"] != p["nk"], p
    assert max(p["nq"] + p["nk"]) <= 6 and p["d"] <= 8 and p["hq"] == 1, p
    assert "out: max |impl - oracle|" in str(e.value) and "make_problem(" in str(e.value)


def test_overflow_bug_is_caught_with_large_scores():
    with pytest.raises(AttentionCheckFailed) as e:
        check_attention(lambda q, k, v, **o: naive.attention(q, k, v, no_max_subtraction=True, **o), supports=NAIVE,
                        max_examples=200)
    p = e.value.problem.params
    assert p["values"] in ("large", "spiky"), p  # |S| ~ 1e3: exp under- or overflows
    assert max(p["nq"]) <= 2 and max(p["nk"]) <= 2, p
    assert "non-finite" in str(e.value) or "max |impl - oracle|" in str(e.value)


def test_assert_close_message_names_output_error_bound_terms_and_index():
    p = make_problem(dtype="bf16", layout="bshd", values="normal", seed=3, nq=[5], nk=[6], hq=2, hk=1, d=8, dv=8,
                     causal=True, window=(-1, -1), scale=None, softcap=0.0, alibi=False, seqlens_k=None, varlen=False)
    out, lse = flashattn.forward(p.q, p.k, p.v, return_lse=True, **p.options)
    verdicts = assert_close((out, lse), p.q, p.k, p.v, **p.options)
    assert [v["output"] for v in verdicts] == ["out", "lse"] and all(v["passed"] for v in verdicts)
    bad = out.astype(np.float32)
    bad[0, 4, 1, 3] += 0.25
    with pytest.raises(AttentionMismatch) as e:
        assert_close((bad, lse), p.q, p.k, p.v, **p.options)
    msg = str(e.value)
    assert "out: max |impl - oracle| = 0.25" in msg or "out: max |impl - oracle| = 0.2" in msg, msg
    assert "bound = max(c * naive, fp32_terms) + contract + floor = max(2 *" in msg
    assert "worst element [b=0, s=4, h=1, x=3]" in msg
    assert "lse" not in [v["output"] for v in e.value.verdicts if not v["passed"]]


def test_reference_matches_float64_formula():
    rng = np.random.default_rng(0)
    q, k, v = (rng.normal(size=(1, 4, 2, 8)).astype(np.float32) for _ in range(3))
    out, lse = reference.forward(q, k, v)
    assert out.dtype == np.float64 and out.shape == (1, 4, 2, 8) and lse.shape == (1, 2, 4)
    s = np.einsum("bqhd,bkhd->bhqk", q.astype(np.float64), k.astype(np.float64)) * float(np.float32(1 / np.sqrt(8)))  # the default scale is an fp32
    p = np.exp(s - s.max(-1, keepdims=True))
    p /= p.sum(-1, keepdims=True)
    np.testing.assert_allclose(out, np.einsum("bhqk,bkhd->bqhd", p, v.astype(np.float64)), rtol=1e-12)
    dout = rng.normal(size=(1, 4, 2, 8)).astype(np.float32)
    g = reference.backward(dout, q, k, v)
    np.testing.assert_allclose(g.dv, np.einsum("bhqk,bqhd->bkhd", p, dout.astype(np.float64)), rtol=1e-12)
    # the same-precision oracle is the naive model: it differs from fp64 in f32
    naive_out, _ = reference.forward(q, k, v, precision="same_as_input")
    assert 0 < np.abs(naive_out - out).max() < 1e-5
