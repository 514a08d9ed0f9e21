"""flashattn.torch: attention as a PyTorch custom op (torch.library.custom_op).

    import flashattn.torch
    out = flashattn.torch.attention(q, k, v, causal=True)   # q [B, Nq, Hq, d], k/v [B, Nk, Hk, d|dv]

Ops flashattn::attention_fwd (-> out, lse) and flashattn::attention_bwd (-> dq, dk, dv, dsinks,
dbias), each with a fake (meta) implementation, and autograd through register_autograd with the
recompute backward: works in eager mode, under autograd and under torch.compile(fullgraph=True).
CPU tensors run the CPU backend; CUDA tensors the GPU backend on the current stream (where the
package was built with it; see flashattn.has_gpu).

Relation to F.scaled_dot_product_attention (docs/python.md has the details):
- layout: flashattn takes [B, N, H, d] ("bshd"); SDPA takes [B, H, N, d]: pass q.transpose(1, 2)
  (a view: no copy, flashattn reads the strides) and transpose the result back;
- causal: flashattn aligns the diagonal bottom-right (row i sees keys j <= i + Nk - Nq), SDPA's
  is_causal top-left (j <= i); they agree when Nq == Nk. SDPA's bottom-right equivalent is
  attn_mask=torch.nn.attention.bias.causal_lower_right(Nq, Nk);
- scale: both default to 1/sqrt(d); scale= means the same;
- GQA: flashattn takes Hk | Hq directly (query head h reads key head h // (Hq/Hk)), as SDPA with
  enable_gqa=True;
- attn_mask (additive float, [B|1, H|1, Nq, Nk]) corresponds to bias=attn_mask.transpose(1, 2);
  rows SDPA fills with NaN when every key is masked are 0 here (docs/semantics.md).
"""
from __future__ import annotations

from typing import Optional

import torch

from . import _core

Tensor = torch.Tensor


def _lse_shape(q: Tensor) -> list[int]:
    return list(_core._lse_shape(q))


def _last_contiguous(x: Optional[Tensor]) -> Optional[Tensor]:
    return x if x is None or x.dim() == 0 or x.stride(-1) == 1 or x.shape[-1] <= 1 else x.contiguous()


def _options(causal, window_left, window_right, diagonal_offset, scale, softcap, alibi_slopes, seqlens_k,
             cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k, sinks, bias, dropout_p, dropout_seed,
             dropout_offset):
    return dict(causal=causal, window=(window_left, window_right), diagonal_offset=diagonal_offset, scale=scale,
                softcap=softcap, alibi_slopes=alibi_slopes, seqlens_k=seqlens_k, cu_seqlens_q=cu_seqlens_q,
                cu_seqlens_k=cu_seqlens_k, max_seqlen_q=max_seqlen_q, max_seqlen_k=max_seqlen_k, sinks=sinks,
                bias=_last_contiguous(bias), dropout_p=dropout_p, dropout_seed=dropout_seed,
                dropout_offset=dropout_offset)


@torch.library.custom_op("flashattn::attention_fwd", mutates_args=())
def attention_fwd(
    q: Tensor, k: Tensor, v: Tensor, causal: bool, window_left: int, window_right: int, diagonal_offset: int,
    scale: Optional[float], softcap: float, alibi_slopes: Optional[Tensor], seqlens_k: Optional[Tensor],
    cu_seqlens_q: Optional[Tensor], cu_seqlens_k: Optional[Tensor], max_seqlen_q: int, max_seqlen_k: int,
    sinks: Optional[Tensor], bias: Optional[Tensor], dropout_p: float, dropout_seed: int, dropout_offset: int,
) -> tuple[Tensor, Tensor]:
    q, k, v = _last_contiguous(q), _last_contiguous(k), _last_contiguous(v)
    out = q.new_empty(tuple(q.shape[:-1]) + (v.shape[-1],))
    lse = q.new_empty(_lse_shape(q), dtype=torch.float32)
    _core.forward(q, k, v, out=out, lse=lse,
                  **_options(causal, window_left, window_right, diagonal_offset, scale, softcap, alibi_slopes,
                             seqlens_k, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k, sinks, bias,
                             dropout_p, dropout_seed, dropout_offset))
    return out, lse


@attention_fwd.register_fake
def _(q, k, v, causal, window_left, window_right, diagonal_offset, scale, softcap, alibi_slopes, seqlens_k,
      cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k, sinks, bias, dropout_p, dropout_seed, dropout_offset):
    out = q.new_empty(tuple(q.shape[:-1]) + (v.shape[-1],))
    lse = q.new_empty(_lse_shape(q), dtype=torch.float32)
    return out, lse


@torch.library.custom_op("flashattn::attention_bwd", mutates_args=())
def attention_bwd(
    dout: Tensor, q: Tensor, k: Tensor, v: Tensor, out: Tensor, lse: Tensor, causal: bool, window_left: int,
    window_right: int, diagonal_offset: int, scale: Optional[float], softcap: float, alibi_slopes: Optional[Tensor],
    seqlens_k: Optional[Tensor], cu_seqlens_q: Optional[Tensor], cu_seqlens_k: Optional[Tensor], max_seqlen_q: int,
    max_seqlen_k: int, sinks: Optional[Tensor], bias: Optional[Tensor], dropout_p: float, dropout_seed: int,
    dropout_offset: int, bias_grad: bool,
) -> tuple[Tensor, Tensor, Tensor, Tensor, Tensor]:
    """-> dq, dk, dv, dsinks (shape [0] without sinks), dbias (shape [0] unless bias_grad)."""
    dout, q, k, v, out = (_last_contiguous(x) for x in (dout, q, k, v, out))
    dq, dk, dv = torch.empty_like(q), torch.empty_like(k), torch.empty_like(v)
    dsinks = q.new_empty((sinks.shape[0] if sinks is not None else 0,), dtype=torch.float32)
    dbias = bias.new_empty(bias.shape) if bias is not None and bias_grad else q.new_empty((0,))
    _core.backward(dout, q, k, v, out, lse.contiguous(), dq=dq, dk=dk, dv=dv,
                   dsinks=dsinks if sinks is not None else None, dbias=dbias if dbias.dim() == 4 else None,
                   return_dbias=False,
                   **_options(causal, window_left, window_right, diagonal_offset, scale, softcap, alibi_slopes,
                              seqlens_k, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k, sinks, bias,
                              dropout_p, dropout_seed, dropout_offset))
    return dq, dk, dv, dsinks, dbias


@attention_bwd.register_fake
def _(dout, q, k, v, out, lse, causal, window_left, window_right, diagonal_offset, scale, softcap, alibi_slopes,
      seqlens_k, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k, sinks, bias, dropout_p, dropout_seed,
      dropout_offset, bias_grad):
    dsinks = q.new_empty((sinks.shape[0] if sinks is not None else 0,), dtype=torch.float32)
    dbias = bias.new_empty(bias.shape) if bias is not None and bias_grad else q.new_empty((0,))
    return torch.empty_like(q), torch.empty_like(k), torch.empty_like(v), dsinks, dbias


_OPTION_NAMES = ("causal", "window_left", "window_right", "diagonal_offset", "scale", "softcap", "alibi_slopes",
                 "seqlens_k", "cu_seqlens_q", "cu_seqlens_k", "max_seqlen_q", "max_seqlen_k", "sinks", "bias",
                 "dropout_p", "dropout_seed", "dropout_offset")


def _setup_context(ctx, inputs, output):
    q, k, v = inputs[:3]
    ctx.options = dict(zip(_OPTION_NAMES, inputs[3:]))
    out, lse = output
    ctx.save_for_backward(q, k, v, out, lse)
    ctx.mark_non_differentiable(lse)


def _backward(ctx, grad_out, grad_lse):
    # The recompute backward: P is rebuilt from q, k and lse. lse is not differentiable.
    q, k, v, out, lse = ctx.saved_tensors
    o = ctx.options
    bias = o["bias"]
    bias_grad = bias is not None and ctx.needs_input_grad[3 + _OPTION_NAMES.index("bias")]
    dq, dk, dv, dsinks, dbias = attention_bwd(grad_out, q, k, v, out, lse, bias_grad=bias_grad, **o)
    grads = dict.fromkeys(_OPTION_NAMES)
    if o["sinks"] is not None:
        grads["sinks"] = dsinks
    if bias_grad:
        grads["bias"] = dbias
    return (dq, dk, dv) + tuple(grads[n] for n in _OPTION_NAMES)


attention_fwd.register_autograd(_backward, setup_context=_setup_context)


def attention(
    q: Tensor, k: Tensor, v: Tensor, *, causal: bool = False, window: Optional[tuple[int, int]] = None,
    diagonal_offset: int = 0, scale: Optional[float] = None, softcap: float = 0.0,
    alibi_slopes: Optional[Tensor] = None, seqlens_k: Optional[Tensor] = None, cu_seqlens_q: Optional[Tensor] = None,
    cu_seqlens_k: Optional[Tensor] = None, max_seqlen_q: int = 0, max_seqlen_k: int = 0,
    sinks: Optional[Tensor] = None, bias: Optional[Tensor] = None, dropout_p: float = 0.0, dropout_seed: int = 0,
    dropout_offset: int = 0, return_lse: bool = False,
):
    """Attention over q [B, Nq, Hq, d], k [B, Nk, Hk, d], v [B, Nk, Hk, dv] (rank 3 [total, H, d]
    with cu_seqlens_q/k for varlen): out [B, Nq, Hq, dv], and lse [B, Hq, Nq] (float32, not
    differentiable) with return_lse. Differentiable in q, k, v, sinks (fp32 [Hq]) and bias
    ([S|1, Nq|1, Hq|1, Nk]: a torch [B, H, Nq, Nk] mask is bias=mask.transpose(1, 2)). Options as
    flashattn.forward (docs/semantics.md): causal is bottom-right aligned; window=(left, right)."""
    left, right = (-1, -1) if window is None else window
    out, lse = attention_fwd(q, k, v, causal, int(left), int(right), int(diagonal_offset), scale, float(softcap),
                             alibi_slopes, seqlens_k, cu_seqlens_q, cu_seqlens_k, int(max_seqlen_q),
                             int(max_seqlen_k), sinks, bias, float(dropout_p), int(dropout_seed), int(dropout_offset))
    return (out, lse) if return_lse else out
