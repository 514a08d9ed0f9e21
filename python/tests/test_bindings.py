"""flashattn.forward / backward: agreement with the fp64 oracle (through flashattn.testing), every
option of the C++ argument structs, errors, zero-copy, the GIL."""
from __future__ import annotations

import contextlib
import inspect
import threading
import time

import ml_dtypes
import numpy as np
import pytest

import flashattn
from flashattn import _flashattn
from flashattn.testing import Supports, assert_close, check_attention, reference

RNG = np.random.default_rng(1234)


def rand(*shape, dtype=np.float32):
    return RNG.normal(0, 1, shape).astype(np.float32).astype(dtype)


def cpu_forward(q, k, v, **o):
    return flashattn.forward(q, k, v, return_lse=True, **o)


def cpu_backward(dout, q, k, v, out, lse, **o):
    return flashattn.backward(dout, q, k, v, out, lse, **o)[:3]


# ---- agreement with the oracle on generated problems -----------------------------------------------

def test_cpu_backend_passes_check_attention_numpy():
    assert check_attention(cpu_forward, cpu_backward, max_examples=150) == 150


def test_cpu_backend_passes_check_attention_torch():
    pytest.importorskip("torch")
    assert check_attention(cpu_forward, cpu_backward, max_examples=60, framework="torch", seed=7) == 60


def test_keywords_cover_every_bound_field():
    """Every field of the C++ tables is reachable from forward()/backward() and no keyword is unbound."""
    python_only = {"window", "out", "lse", "return_lse", "dropout_mask", "return_dropout_mask", "backend", "stream",
                   "return_dbias", "deterministic", "dq", "dk", "dv", "dsinks", "dbias", "dout"}
    for fn, pass_ in ((flashattn.forward, "forward"), (flashattn.backward, "backward")):
        fields = set(_flashattn.field_names(pass_))
        keywords = set(inspect.signature(fn).parameters)
        # window=(left, right) sets window_left / window_right
        assert fields - keywords == {"window_left", "window_right"}, pass_
        assert keywords - fields <= python_only, (pass_, keywords - fields)


# ---- every option against the oracle -------------------------------------------------------------

@pytest.mark.parametrize("dtype", [np.float32, np.float16, ml_dtypes.bfloat16])
def test_options_forward_backward(dtype):
    b, nq, nk, hq, hk, d, dv = 2, 9, 13, 4, 2, 16, 8
    q, k, v = rand(b, nq, hq, d, dtype=dtype), rand(b, nk, hk, d, dtype=dtype), rand(b, nk, hk, dv, dtype=dtype)
    bias = rand(1, nq, hq, nk, dtype=dtype)
    bias[0, 0, 0, :] = -np.inf  # a row that sees no key through the bias
    options = dict(causal=True, window=(5, -1), diagonal_offset=1, scale=0.3, softcap=20.0,
                   alibi_slopes=np.array([0.5, 0.25, 0.125, 0.0625], np.float32),
                   seqlens_k=np.array([13, 7], np.int32), sinks=np.array([0.5, -1, 2, 0], np.float32),
                   bias=bias, dropout_p=0.2, dropout_seed=42, dropout_offset=3)
    out, lse, mask = flashattn.forward(q, k, v, return_lse=True, return_dropout_mask=True, **options)
    assert out.dtype == q.dtype and out.shape == (b, nq, hq, dv) and lse.shape == (b, hq, nq)
    assert mask.shape == (b * hq * nq, 2) and mask.dtype == np.uint8
    assert_close((out, lse), q, k, v, **options)
    dout = rand(b, nq, hq, dv, dtype=dtype)
    g = flashattn.backward(dout, q, k, v, out, lse, **options)
    assert g.dsinks.shape == (hq,) and g.dbias.shape == bias.shape
    assert_close(g, q, k, v, dout=dout, out=out, lse=lse, **options)
    # the oracle writes the same keep mask
    ref_out, ref_lse, ref_mask = flashattn.forward(q, k, v, return_lse=True, return_dropout_mask=True,
                                                   backend="reference", **options)
    np.testing.assert_array_equal(mask, ref_mask)


def test_varlen_and_packed_rank3():
    cu_q, cu_k = np.array([0, 3, 3, 10], np.int32), np.array([0, 5, 9, 9], np.int32)
    q, k, v = rand(10, 4, 8), rand(9, 2, 8), rand(9, 2, 8)
    o = dict(cu_seqlens_q=cu_q, cu_seqlens_k=cu_k, max_seqlen_q=7, max_seqlen_k=5, causal=True)
    out, lse = flashattn.forward(q, k, v, return_lse=True, **o)
    assert out.shape == (10, 4, 8) and lse.shape == (4, 10)
    assert np.all(np.isneginf(lse[:, 3:10])) and np.all(out[3:10] == 0)  # the third sequence has no key
    assert_close((out, lse), q, k, v, **o)
    dout = rand(10, 4, 8)
    assert_close(flashattn.backward(dout, q, k, v, out, lse, **o), q, k, v, dout=dout, out=out, lse=lse, **o)


def test_paged_kv_equals_contiguous_call():
    b, hq, hk, d, page, pages = 2, 4, 2, 16, 3, 7
    k_pool, v_pool = rand(pages, page, hk, d), rand(pages, page, hk, d)
    table = np.array([[5, 2, 0], [1, 6, -1]], np.int32)
    lens = np.array([8, 5], np.int32)
    q = rand(b, 2, hq, d)
    out, lse = flashattn.forward(q, k_pool, v_pool, block_table=table, seqlens_k=lens, causal=True, num_splits=2,
                                 return_lse=True)
    # the same call over contiguous keys, judged by the rule
    k = np.stack([k_pool[t].reshape(-1, hk, d)[:9] for t in np.where(table < 0, 0, table)])
    v = np.stack([v_pool[t].reshape(-1, hk, d)[:9] for t in np.where(table < 0, 0, table)])
    assert_close((out, lse), q, k, v, seqlens_k=lens, causal=True)


@pytest.mark.parametrize("interleaved", [False, True])
def test_kv_cache_append_with_rotary(interleaved):
    b, hq, hk, d, cap, n_new = 2, 4, 2, 16, 12, 2
    k_cache, v_cache = rand(b, cap, hk, d), rand(b, cap, hk, d)
    k_new, v_new, q = rand(b, n_new, hk, d), rand(b, n_new, hk, d), rand(b, n_new, hq, d)
    lens = np.array([4, 9], np.int32)
    ang = np.arange(cap)[:, None] * (10000.0 ** (-np.arange(4) / 4))[None, :]
    cos, sin = np.cos(ang).astype(np.float32), np.sin(ang).astype(np.float32)  # rotary_dim 8
    caches = [x.copy() for x in (k_cache, v_cache)]
    out = flashattn.forward(q, k_cache=k_cache, v_cache=v_cache, k_new=k_new, v_new=v_new, seqlens_k=lens,
                            rotary_cos=cos, rotary_sin=sin, rotary_interleaved=interleaved, causal=True)
    ref = flashattn.forward(q, k_cache=caches[0], v_cache=caches[1], k_new=k_new, v_new=v_new, seqlens_k=lens,
                            rotary_cos=cos, rotary_sin=sin, rotary_interleaved=interleaved, causal=True,
                            backend="reference")
    np.testing.assert_array_equal(k_cache, caches[0])  # the same rows appended (rotated) in both
    np.testing.assert_array_equal(v_cache, caches[1])
    for s in range(b):
        np.testing.assert_array_equal(v_cache[s, lens[s]:lens[s] + n_new], v_new[s])
    np.testing.assert_allclose(out, ref, rtol=1e-5, atol=1e-5)


# ---- errors ----------------------------------------------------------------------------------------

@pytest.mark.parametrize("dtype", [np.float32, ml_dtypes.bfloat16])
def test_block_mask_equals_its_dense_mask_as_minus_inf_bias(dtype):
    """A block mask built from a dense boolean mask hides what a bias of -inf at the hidden elements
    hides: forward and backward agree with that call and with the oracle."""
    rng = np.random.default_rng(3)
    b, nq, nk, hq, hk, d = 2, 37, 53, 4, 2, 16
    q, k, v = rand(b, nq, hq, d, dtype=dtype), rand(b, nk, hk, d, dtype=dtype), rand(b, nk, hk, d, dtype=dtype)
    dense = rng.random((b, nq, hq, nk)) < 0.6
    dense[:, :, :, 40:48] = False  # a key block no row sees: unlisted
    dense[1, 0:16, 0, :] = True  # full blocks
    mask = flashattn.block_mask_from_dense(dense, 16, 8)
    assert mask.bits is not None and mask.partial_count.sum() > 0 and mask.full_count.sum() > 0
    out, lse = flashattn.forward(q, k, v, block_mask=mask, causal=True, return_lse=True)
    bias = np.where(dense, 0, -np.inf).astype(np.float32)
    out_bias, lse_bias = flashattn.forward(q, k, v, bias=bias, causal=True, return_lse=True)
    np.testing.assert_allclose(out.astype(np.float32), out_bias.astype(np.float32), atol=2e-2, rtol=0)
    np.testing.assert_allclose(lse, lse_bias, atol=1e-4, rtol=0)
    assert_close((out, lse), q, k, v, block_mask=mask, causal=True)
    dout = rand(b, nq, hq, d, dtype=dtype)
    grads = flashattn.backward(dout, q, k, v, out, lse, block_mask=mask, causal=True)
    assert_close(tuple(grads[:3]), q, k, v, dout=dout, out=out, lse=lse, block_mask=mask, causal=True)
    # A mask shared by every sequence and head (size-1 lists and bits), given as lists.
    shared = flashattn.block_mask_from_dense(dense[:1, :, :1], 16, 8)
    assert shared.full_count.shape[:2] == (1, 1)
    lists = flashattn.BlockMask(16, 8, *(x.tolist() for x in shared[2:6]), bits=shared.bits)
    out_shared = flashattn.forward(q, k, v, block_mask=lists)
    out_ref = flashattn.forward(q, k, v, bias=np.where(dense[:1, :, :1], 0, -np.inf).astype(np.float32))
    np.testing.assert_allclose(out_shared.astype(np.float32), out_ref.astype(np.float32), atol=2e-2, rtol=0)


def test_block_mask_errors():
    q, k, v = rand(1, 8, 2, 16), rand(1, 8, 2, 16), rand(1, 8, 2, 16)
    m = flashattn.block_mask_from_dense(np.ones((1, 8, 2, 8), bool), 4, 4)
    with pytest.raises(ValueError, match="given together"):
        flashattn.forward(q, k, v, block_mask=m._replace(full_index=None))
    with pytest.raises(ValueError, match="3 dimensions"):
        flashattn.forward(q, k, v, block_mask=m._replace(full_count=m.full_count.reshape(-1)))
    with pytest.raises(ValueError, match="same shapes"):
        flashattn.forward(q, k, v, block_mask=m._replace(partial_count=m.partial_count[:, :1].copy(),
                                                         partial_index=m.partial_index[:, :1].copy()))
    with pytest.raises(TypeError, match="flashattn.BlockMask"):
        flashattn.forward(q, k, v, block_mask={"block_q": 4})
    with pytest.raises(TypeError, match="uint8"):
        flashattn.forward(q, k, v, block_mask=m._replace(bits=np.zeros((1, 8, 2, 1), np.int32)))
    bad = m.full_index.copy()
    bad[0, 0, 0, 0] = 7  # a key block past the keys: the C++ validation names it
    with pytest.raises(ValueError, match="block_mask"):
        flashattn.forward(q, k, v, block_mask=m._replace(full_index=bad))
    with pytest.raises(ValueError, match="block_q"):
        flashattn.block_mask_from_dense(np.ones((1, 8, 2, 8), bool), 0, 4)


@pytest.mark.parametrize("kv", ["int8", "float8_e4m3fn", "float8_e5m2"])
@pytest.mark.parametrize("scales", ["tensor", "head", "token"])
def test_quantized_kv_is_the_call_over_its_dequantized_values(kv, scales):
    """int8 / fp8 K/V with scales per tensor, head or (row, head): the CPU agrees with itself on the
    values dequantized here (numpy / ml_dtypes) and with the oracle, for f32 and bf16 queries."""
    rng = np.random.default_rng(7)
    b, nq, nk, hq, hk, d = 2, 3, 37, 4, 2, 16
    kf, vf = rng.standard_normal((b, nk, hk, d)), rng.standard_normal((b, nk, hk, d))
    largest = {"int8": 127, "float8_e4m3fn": 448, "float8_e5m2": 57344}[kv]
    def scale_of(x):
        m = {"tensor": np.abs(x).max().reshape(1), "head": np.abs(x).max(axis=(0, 1, 3)),
             "token": np.abs(x).max(axis=3)}[scales]
        return (m / largest).astype(np.float32)
    def expand(s):
        return s.reshape(1, 1, 1, 1) if scales == "tensor" else s[None, None, :, None] if scales == "head" else s[..., None]
    ks, vs = scale_of(kf), scale_of(vf)
    def quantize(x, s):
        y = x / expand(s)
        return np.clip(np.rint(y), -127, 127).astype(np.int8) if kv == "int8" else y.astype(getattr(ml_dtypes, kv))
    kq, vq = quantize(kf, ks), quantize(vf, vs)
    kd = (kq.astype(np.float32) * expand(ks)).astype(np.float32)
    vd = (vq.astype(np.float32) * expand(vs)).astype(np.float32)
    for dtype in (np.float32, ml_dtypes.bfloat16):
        q = rand(b, nq, hq, d, dtype=dtype)
        out, lse = flashattn.forward(q, kq, vq, k_scale=ks, v_scale=vs, causal=True, return_lse=True)
        assert out.dtype == q.dtype
        assert_close((out, lse), q, kq, vq, k_scale=ks, v_scale=vs, causal=True)
        if dtype == np.float32:
            plain = flashattn.forward(q, kd, vd, causal=True, num_splits=1)
            np.testing.assert_allclose(out, plain, atol=2e-6, rtol=0)


@pytest.mark.parametrize("kv", ["int8", "float8_e4m3fn", "float8_e5m2"])
@pytest.mark.parametrize("scales", ["head", "token"])
def test_append_into_a_quantized_cache(kv, scales):
    """An append quantizes the new rows into 8-bit caches (per-token: computing and writing their
    scales); the call equals the plain call over the caches it wrote."""
    rng = np.random.default_rng(11)
    b, hq, hk, d, cap, n_new = 2, 4, 2, 16, 10, 2
    lens = np.array([3, 6], np.int32)
    code = np.int8 if kv == "int8" else getattr(ml_dtypes, kv)
    largest = np.float32({"int8": 127, "float8_e4m3fn": 448, "float8_e5m2": 57344}[kv])

    def quantize(y):  # y: float32, already divided by its scale; ties to even, saturating
        return np.clip(np.rint(y), -127, 127).astype(np.int8) if kv == "int8" else np.clip(y, -largest, largest).astype(code)

    if scales == "head":
        ks, vs = np.array([0.02, 0.03], np.float32), np.array([0.01, 0.004], np.float32)
    else:
        ks, vs = (np.full((b, cap, hk), np.nan, np.float32) for _ in range(2))
        for s in range(b):
            ks[s, :lens[s]], vs[s, :lens[s]] = 0.02, 0.01
    k_cache = quantize(rng.uniform(-50, 50, (b, cap, hk, d)).astype(np.float32))
    v_cache = quantize(rng.uniform(-50, 50, (b, cap, hk, d)).astype(np.float32))
    k_new, v_new, q = rand(b, n_new, hk, d), rand(b, n_new, hk, d), rand(b, n_new, hq, d)
    before = [x.copy() for x in (k_cache, v_cache, ks, vs)]
    out = flashattn.forward(q, k_cache=k_cache, v_cache=v_cache, k_new=k_new, v_new=v_new, seqlens_k=lens,
                            k_scale=ks, v_scale=vs, causal=True)
    for cache, scale, new, old, old_scale in ((k_cache, ks, k_new, before[0], before[2]),
                                              (v_cache, vs, v_new, before[1], before[3])):
        for s in range(b):
            rows = slice(lens[s], lens[s] + n_new)
            if scales == "token":
                want = np.abs(new[s]).max(axis=-1) / largest  # float32 division, [n_new, hk]
                np.testing.assert_array_equal(scale[s, rows], want)
                np.testing.assert_array_equal(scale[s, :lens[s]], old_scale[s, :lens[s]])
                assert np.isnan(scale[s, lens[s] + n_new:]).all()  # rows past the append untouched
                divisor = want[..., None]
            else:
                divisor = scale[None, :, None]
            np.testing.assert_array_equal(cache[s, rows].view(np.uint8), quantize(new[s] / divisor).view(np.uint8))
            untouched = np.r_[0:lens[s], lens[s] + n_new:cap]
            np.testing.assert_array_equal(cache[s, untouched].view(np.uint8), old[s, untouched].view(np.uint8))
    plain = flashattn.forward(q, k_cache, v_cache, k_scale=ks, v_scale=vs, seqlens_k=lens + n_new, causal=True)
    np.testing.assert_array_equal(out, plain)
    with pytest.raises(ValueError, match="not finite: an i8 cache cannot hold it") if kv == "int8" else contextlib.nullcontext():
        bad = k_new.copy()
        bad[0, 0, 0, 0] = np.nan
        flashattn.forward(q, k_cache=k_cache, v_cache=v_cache, k_new=bad, v_new=v_new, seqlens_k=lens,
                          k_scale=ks, v_scale=vs, causal=True)


def test_quantized_kv_errors():
    q = rand(1, 2, 2, 8)
    k8 = np.ones((1, 4, 2, 8), np.int8)
    with pytest.raises(ValueError, match="kv_scales.k is null"):
        flashattn.forward(q, k8, k8)
    with pytest.raises(ValueError, match="another granularity"):
        flashattn.forward(q, k8, k8, k_scale=np.ones(2, np.float32), v_scale=0.5)
    with pytest.raises(ValueError, match=r"kv_scales.v\[1\] \(0\) must be finite and > 0"):
        flashattn.forward(q, k8, k8, k_scale=np.ones(2, np.float32), v_scale=np.array([1, 0], np.float32))
    with pytest.raises(ValueError, match="q.dtype \\(i8\\) must be f32"):
        flashattn.forward(np.ones((1, 2, 2, 8), np.int8), k8, k8, k_scale=0.5, v_scale=0.5)
    with pytest.raises(ValueError, match="forward only"):
        out, lse = flashattn.forward(q, k8, k8, k_scale=0.5, v_scale=0.5, return_lse=True)
        flashattn.backward(out, q, k8, k8, out, lse, k_scale=0.5, v_scale=0.5)
    with pytest.raises(ValueError, match="k_scale has 3 elements; the call needs 2"):
        flashattn.forward(q, k8, k8, k_scale=np.ones(3, np.float32), v_scale=np.ones(2, np.float32))


def test_errors_carry_the_cpp_message():
    q, k, v = rand(1, 4, 8, 16), rand(1, 4, 3, 16), rand(1, 4, 3, 16)
    with pytest.raises(ValueError, match=r"^flashattn: k.heads \(3\) must divide q.heads \(8\)"):
        flashattn.forward(q, k, v)
    k, v = rand(1, 4, 2, 16), rand(1, 4, 2, 16)
    with pytest.raises(ValueError, match="softcap"):
        flashattn.forward(q, k, v, softcap=-1.0)
    with pytest.raises(ValueError, match="seqlens_k has 2 elements; the call needs 1"):
        flashattn.forward(q, k, v, seqlens_k=[4, 4])
    with pytest.raises(ValueError, match="lse has 31 elements; the call needs 32"):
        flashattn.forward(q, k, v, lse=np.empty(31, np.float32))
    with pytest.raises(ValueError, match="last dimension must be contiguous"):
        flashattn.forward(np.asfortranarray(q), k, v)
    with pytest.raises(ValueError, match="dropout_mask has 3 elements; the call needs 32"):
        flashattn.forward(q, k, v, dropout_p=0.5, dropout_mask=np.empty(3, np.uint8))
    with pytest.raises(ValueError, match="cu_seqlens"):  # validated before the mask's size is computed
        flashattn.forward(q[0], k[0], v[0], cu_seqlens_q=[0, 4], dropout_p=0.5, dropout_mask=np.empty(3, np.uint8))
    with pytest.raises(ValueError, match="dropout_p"):
        flashattn.forward(q, k, v, dropout_p=1.0)
    ro = np.empty((1, 4, 8, 16), np.float32)
    ro.setflags(write=False)
    with pytest.raises(ValueError, match="out is an output and must be writable"):
        flashattn.forward(q, k, v, out=ro)
    with pytest.raises(ValueError, match="lse"):  # the backward requires the forward's lse
        flashattn.backward(q, q, k, v, q, None)


def test_type_errors():
    q, k, v = rand(1, 4, 2, 16), rand(1, 4, 2, 16), rand(1, 4, 2, 16)
    with pytest.raises(TypeError, match="q has dtype int32"):
        flashattn.forward(q.astype(np.int32), k, v)
    with pytest.raises(TypeError, match="q has dtype float64"):
        flashattn.forward(q.astype(np.float64), k, v)
    with pytest.raises(TypeError, match="seqlens_k has dtype int64; expected int32"):
        flashattn.forward(q, k, v, seqlens_k=np.array([4], np.int64))
    with pytest.raises(TypeError, match="must be an array"):
        flashattn.forward("q", k, v)
    with pytest.raises(TypeError):
        flashattn.forward(q, k, v, no_such_option=1)
    with pytest.raises(TypeError, match="unknown argument 'no_such_field'"):
        _flashattn.forward("cpu", dict(q=q, k=k, v=v, out=q.copy(), no_such_field=1))


def test_integer_16_bit_arrays_are_not_taken_for_bf16():
    # numpy has no bf16: an ml_dtypes.bfloat16 array travels as a uint16 view marked bf16 by name.
    # A plain uint16 (or int16) array holds integers, not bf16 bits: rejected wherever it is passed,
    # input or output, numpy or torch, and the mark of one argument does not carry to another.
    q, k, v = rand(1, 4, 2, 16), rand(1, 4, 2, 16), rand(1, 4, 2, 16)
    qb, kb, vb = (x.astype(ml_dtypes.bfloat16) for x in (q, k, v))
    for bad in (np.uint16, np.int16):
        with pytest.raises(TypeError, match=f"q has dtype {np.dtype(bad).name}"):
            flashattn.forward(q.astype(bad), k, v)
        with pytest.raises(TypeError, match=f"k has dtype {np.dtype(bad).name}"):
            flashattn.forward(qb, kb.view(bad), vb)
        with pytest.raises(TypeError, match=f"out has dtype {np.dtype(bad).name}"):
            flashattn.forward(qb, kb, vb, out=np.zeros(q.shape, bad))
    with pytest.raises(TypeError, match="k has dtype uint16"):  # q's bf16 mark is q's alone
        _flashattn.forward("cpu", dict(q=qb.view(np.uint16), k=kb.view(np.uint16), v=vb.view(np.uint16),
                                       out=np.zeros(q.shape, np.uint16)), ["q"])
    out = np.zeros(q.shape, ml_dtypes.bfloat16)
    flashattn.forward(qb, kb, vb, out=out)  # the marked form works, and writes bf16
    assert np.isfinite(out.astype(np.float32)).all() and out.astype(np.float32).any()
    torch = pytest.importorskip("torch")
    with pytest.raises(TypeError, match="q has dtype int16"):
        flashattn.forward(torch.from_numpy(q.astype(np.int16)), torch.from_numpy(k), torch.from_numpy(v))


# ---- zero-copy -------------------------------------------------------------------------------------

def test_inputs_are_not_copied_strided_or_not():
    buf = rand(2, 3, 5, 16)  # [B, H, N, d]: a bhsd buffer viewed as bshd
    x = buf.transpose(0, 2, 1, 3)
    for a in (buf, x, x[:, 1:4], rand(2, 5, 3, 20)[..., :16]):
        seen = _flashattn._inspect_view(a)
        assert seen["data"] == a.__array_interface__["data"][0]
        assert seen["strides"] == tuple(s // 4 for s in a.strides[:3])
    bf = buf.astype(ml_dtypes.bfloat16).transpose(0, 2, 1, 3)
    assert _flashattn._inspect_view(bf.view(np.uint16), bf16=True)["data"] == bf.__array_interface__["data"][0]
    torch = pytest.importorskip("torch")
    t = torch.randn(2, 3, 5, 16, dtype=torch.bfloat16).transpose(1, 2)
    seen = _flashattn._inspect_view(t)
    assert seen["data"] == t.data_ptr() and seen["dtype"] == "bf16" and seen["strides"] == tuple(t.stride()[:3])


def test_out_buffers_are_written_in_place():
    q, k, v = rand(1, 6, 2, 8), rand(1, 7, 2, 8), rand(1, 7, 2, 8)
    expect = flashattn.forward(q, k, v, causal=True)
    big = np.full((1, 2, 6, 11), 7.0, np.float32)  # a padded bhsd buffer: out is a strided view into it
    out = big[..., :8].transpose(0, 2, 1, 3)
    lse = np.empty((1, 2, 6), np.float32)
    got, got_lse = flashattn.forward(q, k, v, causal=True, out=out, lse=lse)
    assert got is out and got_lse is lse
    np.testing.assert_array_equal(big[..., :8].transpose(0, 2, 1, 3), expect)
    assert np.all(big[..., 8:] == 7.0)  # padding untouched
    g = flashattn.backward(rand(1, 6, 2, 8), q, k, v, expect, lse, causal=True,
                           dq=np.zeros_like(q), dk=np.zeros_like(k), dv=np.zeros_like(v))
    assert np.any(g.dq != 0)
    torch = pytest.importorskip("torch")
    tq, tk, tv = (torch.from_numpy(x) for x in (q, k, v))
    tout = torch.empty(1, 6, 2, 8)
    assert flashattn.forward(tq, tk, tv, causal=True, out=tout) is tout
    np.testing.assert_array_equal(tout.numpy(), expect)
    assert isinstance(flashattn.forward(tq, tk, tv), torch.Tensor)  # allocated in the input's framework


# ---- the GIL -------------------------------------------------------------------------------------

def test_gil_is_released_during_compute():
    """While one thread is inside a long forward call, the main thread keeps running Python code:
    it records time stamps strictly inside the call's interval (impossible if the GIL were held)."""
    q, k, v = rand(1, 384, 4, 64), rand(1, 384, 4, 64), rand(1, 384, 4, 64)
    span = {}

    def work():
        span["start"] = time.perf_counter()
        for _ in range(3):
            flashattn.forward(q, k, v, backend="reference")  # the oracle: long, one thread
        span["end"] = time.perf_counter()

    stamps = []
    t = threading.Thread(target=work)
    t.start()
    while t.is_alive():
        stamps.append(time.perf_counter())
    t.join()
    third = (span["end"] - span["start"]) / 3
    inside = [s for s in stamps if span["start"] + third < s < span["end"] - third]
    assert inside, "no Python ran in the main thread during the middle third of the call"
