"""PyTorch's CPU scaled_dot_product_attention as an outside kernel for flashattn.testing (a kernel
nobody here wrote): adapters from flashattn's calling convention ([B, N, H, d], bottom-right causal)
to SDPA's ([B, H, N, d], is_causal top-left; causal_lower_right for Nq != Nk)."""
from __future__ import annotations

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel
from torch.nn.attention.bias import causal_lower_right

BACKENDS = {"flash": SDPBackend.FLASH_ATTENTION, "math": SDPBackend.MATH}


def _sdpa(backend: str, q, k, v, causal=False, scale=None):
    nq, nk, hq, hk = q.shape[1], k.shape[1], q.shape[2], k.shape[2]
    qt, kt, vt = q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2)
    mask, is_causal = None, False
    if causal:
        if nq == nk:
            is_causal = True
        else:
            mask = causal_lower_right(nq, nk)
    with sdpa_kernel(BACKENDS[backend]):
        out = F.scaled_dot_product_attention(qt, kt, vt, attn_mask=mask, is_causal=is_causal, scale=scale,
                                             enable_gqa=hq != hk)
    return out.transpose(1, 2)


def forward(backend: str):
    def f(q, k, v, **options):
        return _sdpa(backend, q, k, v, **options), None
    return f


def backward(backend: str):
    def b(dout, q, k, v, out, lse, **options):
        q, k, v = (x.detach().clone().requires_grad_(True) for x in (q, k, v))
        o = _sdpa(backend, q, k, v, **options)
        o.backward(dout)
        return q.grad, k.grad, v.grad
    return b
