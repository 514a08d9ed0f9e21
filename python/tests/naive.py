"""A naive numpy attention written the way a user would write one (not flashattn code): fp32
softmax over materialised scores, bottom-right causal / windows, GQA, dv != d, empty rows -> 0.
`causal_top_left` and `no_max_subtraction` plant two classic bugs."""
from __future__ import annotations

import numpy as np


def attention(q, k, v, causal=False, window=(-1, -1), scale=None, causal_top_left=False,
              no_max_subtraction=False):
    dtype = q.dtype
    q, k, v = (np.asarray(x, np.float32) for x in (q, k, v))
    b, nq, hq, d = q.shape
    nk, hk = k.shape[1], k.shape[2]
    g = hq // hk
    k, v = np.repeat(k, g, axis=2), np.repeat(v, g, axis=2)
    s = np.einsum("bqhd,bkhd->bhqk", q, k) * np.float32(1 / np.sqrt(d) if scale is None else scale)
    i, j = np.arange(nq)[:, None], np.arange(nk)[None, :]
    diag = i if causal_top_left else i + nk - nq
    visible = np.ones((nq, nk), bool)
    left, right = window
    if causal:
        right = 0
    if right >= 0:
        visible &= j <= diag + right
    if left >= 0:
        visible &= j >= diag - left
    s = np.where(visible, s, -np.inf)
    m = np.zeros(s.shape[:-1] + (1,), np.float32) if no_max_subtraction else np.max(s, axis=-1, keepdims=True, initial=-np.inf)
    m = np.where(np.isfinite(m), m, 0)
    p = np.exp(s - m)
    l = p.sum(-1, keepdims=True)
    out = np.einsum("bhqk,bkhd->bqhd", np.where(l > 0, p / np.where(l > 0, l, 1), 0), v)
    lse = np.where(l[..., 0] > 0, np.log(np.where(l[..., 0] > 0, l[..., 0], 1)) + m[..., 0], -np.inf)
    return out.astype(dtype), lse.astype(np.float32)
