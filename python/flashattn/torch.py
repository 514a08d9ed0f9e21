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


# The ops' option parameters, derived from flashattn's declared list (_core.ATTENTION_OPTIONS): the
# C++ field names (window as window_left, window_right; a block mask as its block sizes and arrays,
# block_q = block_k = 0 without one) with their schema types.
_SCHEMA_TYPES = {"bool": "bool", "int": "int", "float": "float", "optional_float": "float?", "array": "Tensor?"}
# (op parameter, BlockMask field, schema type)
_BLOCK_MASK_PARAMS = (("block_q", "block_q", "int"), ("block_k", "block_k", "int")) + tuple(
    (f"block_{f}", f, "Tensor?") for f in _core.BlockMask._fields[2:])


def _op_options() -> tuple[tuple[str, str], ...]:
    params: list[tuple[str, str]] = []
    for o in _core.ATTENTION_OPTIONS:
        if o.kind == "window":
            params += [("window_left", "int"), ("window_right", "int")]
        elif o.kind == "block_mask":
            params += [(name, kind) for name, _, kind in _BLOCK_MASK_PARAMS]
        else:
            params.append((o.name, _SCHEMA_TYPES[o.kind]))
    return tuple(params)


_OP_OPTIONS = _op_options()
_OPTION_NAMES = tuple(name for name, _ in _OP_OPTIONS)
_OPTIONS_SCHEMA = ", ".join(f"{kind} {name}" for name, kind in _OP_OPTIONS)


def _op_values(fields: dict, device=None) -> tuple:
    """The ops' option arguments (in _OPTION_NAMES order) of the C++ fields of a call; a block
    mask's arrays (numpy from block_mask_from_dense, or lists) become tensors on `device`."""
    fields = dict(fields)
    m = fields.pop("block_mask") or _core.BlockMask(0, 0)
    for name, field, kind in _BLOCK_MASK_PARAMS:
        x = getattr(m, field)
        fields[name] = x if kind == "int" or x is None else torch.as_tensor(x, device=device)
    return tuple(fields[n] for n in _OPTION_NAMES)


def _keywords(values) -> dict:
    """flashattn.forward/backward keywords of the ops' option arguments (in _OPTION_NAMES order)."""
    o = dict(zip(_OPTION_NAMES, values))
    o["window"] = (o.pop("window_left"), o.pop("window_right"))
    o["bias"] = _last_contiguous(o["bias"])
    m = _core.BlockMask(**{field: o.pop(name) for name, field, _ in _BLOCK_MASK_PARAMS})
    o["block_mask"] = m if m.block_q or m.block_k else None
    return o


def _attention_fwd(q: Tensor, k: Tensor, v: Tensor, *options) -> tuple[Tensor, Tensor]:
    q, k, v = _last_contiguous(q), _last_contiguous(k), _last_contiguous(v)
    out = q.new_empty(tuple(q.shape[:-1]) + (v.shape[-1],))
    lse = q.new_empty(_lse_shape(q), dtype=torch.float32)
    _core.forward(q, k, v, out=out, lse=lse, **_keywords(options))
    return out, lse


attention_fwd = torch.library.custom_op(
    "flashattn::attention_fwd", _attention_fwd, mutates_args=(),
    schema=f"(Tensor q, Tensor k, Tensor v, {_OPTIONS_SCHEMA}) -> (Tensor, Tensor)")


@attention_fwd.register_fake
def _(q, k, v, *options):
    out = q.new_empty(tuple(q.shape[:-1]) + (v.shape[-1],))
    lse = q.new_empty(_lse_shape(q), dtype=torch.float32)
    return out, lse


def _gradient_buffers(q, k, v, sinks, bias, bias_grad):
    dsinks = q.new_empty((sinks.shape[0] if sinks is not None else 0,), dtype=torch.float32)
    dbias = bias.new_empty(bias.shape) if bias is not None and bias_grad else q.new_empty((0,))
    return torch.empty_like(q), torch.empty_like(k), torch.empty_like(v), dsinks, dbias


def _attention_bwd(dout: Tensor, q: Tensor, k: Tensor, v: Tensor, out: Tensor, lse: Tensor, bias_grad: bool,
                   *options) -> tuple[Tensor, Tensor, Tensor, Tensor, Tensor]:
    """-> dq, dk, dv, dsinks (shape [0] without sinks), dbias (shape [0] unless bias_grad)."""
    dout, q, k, v, out = (_last_contiguous(x) for x in (dout, q, k, v, out))
    o = _keywords(options)
    dq, dk, dv, dsinks, dbias = _gradient_buffers(q, k, v, o["sinks"], o["bias"], bias_grad)
    _core.backward(dout, q, k, v, out, lse.contiguous(), dq=dq, dk=dk, dv=dv,
                   dsinks=dsinks if o["sinks"] is not None else None, dbias=dbias if dbias.dim() == 4 else None,
                   return_dbias=False, **o)
    return dq, dk, dv, dsinks, dbias


attention_bwd = torch.library.custom_op(
    "flashattn::attention_bwd", _attention_bwd, mutates_args=(),
    schema=f"(Tensor dout, Tensor q, Tensor k, Tensor v, Tensor out, Tensor lse, bool bias_grad, {_OPTIONS_SCHEMA})"
           " -> (Tensor, Tensor, Tensor, Tensor, Tensor)")


@attention_bwd.register_fake
def _(dout, q, k, v, out, lse, bias_grad, *options):
    o = dict(zip(_OPTION_NAMES, options))
    return _gradient_buffers(q, k, v, o["sinks"], o["bias"], bias_grad)


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
    dq, dk, dv, dsinks, dbias = attention_bwd(grad_out, q, k, v, out, lse, bias_grad, *(o[n] for n in _OPTION_NAMES))
    grads = dict.fromkeys(_OPTION_NAMES)
    if o["sinks"] is not None:
        grads["sinks"] = dsinks
    if bias_grad:
        grads["bias"] = dbias
    return (dq, dk, dv) + tuple(grads[n] for n in _OPTION_NAMES)


attention_fwd.register_autograd(_backward, setup_context=_setup_context)


@_core._with_option_keywords
def attention(q: Tensor, k: Tensor, v: Tensor, *, return_lse: bool = False, **options):
    """Attention over q [B, Nq, Hq, d], k [B, Nk, Hk, d], v [B, Nk, Hk, dv] (rank 3 [total, H, d]
    with cu_seqlens_q/k for varlen): out [B, Nq, Hq, dv], and lse [B, Hq, Nq] (float32, not
    differentiable) with return_lse. Differentiable in q, k, v, sinks (fp32 [Hq]) and bias
    ([S|1, Nq|1, Hq|1, Nk]: a torch [B, H, Nq, Nk] mask is bias=mask.transpose(1, 2)). Options as
    flashattn.forward (docs/semantics.md): causal is bottom-right aligned; window=(left, right)."""
    fields = _core._attention_options(options, "flashattn.torch.attention")
    out, lse = attention_fwd(q, k, v, *_op_values(fields, q.device))
    return (out, lse) if return_lse else out
