"""flashattn.torch.attention: eager, autograd (gradients judged against the fp64 oracle), opcheck,
torch.compile(fullgraph=True). CPU tensors only here (no GPU on the test machines)."""
from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

import flashattn  # noqa: E402
import flashattn.torch as ft  # noqa: E402
from flashattn._core import _attention_options  # noqa: E402
from flashattn.testing import assert_close  # noqa: E402

CASES = {
    "gqa_causal_cross": dict(shape=(2, 5, 7, 4, 2, 16, 16), options=dict(causal=True)),
    "window_softcap_alibi_scale": dict(shape=(1, 9, 9, 2, 2, 8, 8),
                                       options=dict(window=(3, 2), softcap=10.0, scale=0.4,
                                                    alibi_slopes=torch.tensor([0.5, 0.25]))),
    "dv_sinks_bias_dropout": dict(shape=(2, 6, 8, 2, 1, 16, 8),
                                  options=dict(sinks=torch.tensor([0.3, -0.5]), bias=torch.randn(1, 6, 2, 8),
                                               dropout_p=0.25, dropout_seed=9, seqlens_k=torch.tensor([8, 3],
                                                                                                      dtype=torch.int32))),
    "block_mask_causal": dict(shape=(2, 19, 24, 4, 2, 16, 16),
                              options=dict(causal=True, block_mask=flashattn.block_mask_from_dense(
                                  torch.rand(2, 19, 4, 24, generator=torch.Generator().manual_seed(1)) < 0.7, 8, 8))),
}


def make(shape, dtype=torch.float32, grad=True):
    b, nq, nk, hq, hk, d, dv = shape
    g = torch.Generator().manual_seed(0)
    q = torch.randn(b, nq, hq, d, generator=g).to(dtype)
    k = torch.randn(b, nk, hk, d, generator=g).to(dtype)
    v = torch.randn(b, nk, hk, dv, generator=g).to(dtype)
    return [x.requires_grad_(grad) for x in (q, k, v)]


def op_args(q, k, v, options):
    """The ops' positional arguments for flashattn keywords (the order is the ops' schema's)."""
    return (q, k, v) + ft._op_values(_attention_options(options))


@pytest.mark.parametrize("name", CASES)
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_eager_and_autograd_against_the_oracle(name, dtype):
    case = CASES[name]
    q, k, v = make(case["shape"], dtype)
    options = dict(case["options"])
    if "sinks" in options:
        options["sinks"] = options["sinks"].detach().clone().requires_grad_(True)
    if "bias" in options:
        options["bias"] = options["bias"].detach().to(dtype).requires_grad_(True)
    out, lse = ft.attention(q, k, v, return_lse=True, **options)
    assert out.requires_grad and not lse.requires_grad
    assert_close((out, lse), q, k, v, **options)
    dout = torch.randn_like(out)
    out.backward(dout)
    grads = (q.grad, k.grad, v.grad, options["sinks"].grad if "sinks" in options else None,
             options["bias"].grad if "bias" in options else None)
    assert all(g is not None for g in grads[:3])
    assert_close(grads, q, k, v, dout=dout, out=out, lse=lse, **options)
    if "sinks" in options:
        assert grads[3] is not None and torch.isfinite(grads[3]).all()
    if "bias" in options:
        assert grads[4].shape == options["bias"].shape


@pytest.mark.parametrize("name", CASES)
def test_opcheck(name):
    case = CASES[name]
    q, k, v = make(case["shape"], grad=True)
    args = op_args(q, k, v, case["options"])
    torch.library.opcheck(ft.attention_fwd, args)
    with torch.no_grad():
        out, lse = ft.attention_fwd(*op_args(q.detach(), k.detach(), v.detach(), case["options"]))
    dout = torch.randn_like(out)
    bias_grad = args[3 + ft._OPTION_NAMES.index("bias")] is not None
    bargs = (dout,) + args[:3] + (out, lse, bias_grad) + args[3:]
    torch.library.opcheck(ft.attention_bwd, tuple(x.detach() if isinstance(x, torch.Tensor) else x for x in bargs))


def test_torch_compile_fullgraph_matches_eager():
    q, k, v = make((2, 8, 8, 4, 2, 16, 16))
    bias = torch.randn(1, 8, 4, 8, requires_grad=True)

    def f(q, k, v, bias):
        return ft.attention(q, k, v, causal=True, bias=bias, softcap=5.0)

    compiled = torch.compile(f, fullgraph=True)
    dout = torch.randn(2, 8, 4, 16)
    out = compiled(q, k, v, bias)
    out.backward(dout)
    got = [x.grad.clone() for x in (q, k, v, bias)]
    for x in (q, k, v, bias):
        x.grad = None
    expect = f(q, k, v, bias)
    expect.backward(dout)
    assert torch.equal(out, expect)  # the same op on the same inputs: the CPU backend is deterministic
    for g, x in zip(got, (q, k, v, bias)):
        assert torch.equal(g, x.grad)


def test_strided_bhsd_views_as_sdpa_layout():
    """SDPA's [B, H, N, d] tensors passed as transposed views (no copy) give SDPA's result."""
    g = torch.Generator().manual_seed(1)
    q, k, v = (torch.randn(2, 4, 6, 16, generator=g) for _ in range(3))
    out = ft.attention(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2), causal=True).transpose(1, 2)
    ref = torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True)
    torch.testing.assert_close(out, ref, rtol=1e-5, atol=1e-5)
