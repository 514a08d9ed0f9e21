"""check_attention: the whole cross-check against the fp64 oracle on anyone's attention function."""
from __future__ import annotations

import dataclasses
from typing import Any, Callable

import numpy as np

from ._judge import AttentionMismatch, assert_close, reference
from .strategies import Problem, Supports, attention_problems


class AttentionCheckFailed(AssertionError):
    """check_attention found a case outside the tolerance rule (or an exception); .problem is the
    shrunk case (its repr rebuilds it: flashattn.testing.make_problem(...))."""

    def __init__(self, message: str, problem: Problem | None):
        super().__init__(message)
        self.problem = problem


def _convert(framework: str, x: Any) -> Any:
    if framework == "numpy" or not isinstance(x, np.ndarray):
        return x
    import torch

    if x.dtype.name == "bfloat16":
        return torch.from_numpy(x.view(np.int16)).view(torch.bfloat16)  # keeps x's strides
    return torch.from_numpy(x)


def _describe(p: Problem) -> str:
    pr = p.params
    shape = f"q {list(p.q.shape)} k {list(p.k.shape)} v {list(p.v.shape)} {pr['dtype']} {pr['layout']}"
    opts = ", ".join(f"{k}={v.tolist() if isinstance(v, np.ndarray) else v}" for k, v in p.options.items())
    return f"{shape}; options: {opts or 'none'}; values: {pr['values']}"


def check_attention(
    forward: Callable[..., Any],
    backward: Callable[..., Any] | None = None,
    *,
    supports: Supports = Supports(),
    max_examples: int = 100,
    framework: str = "numpy",
    seed: int | None = 0,
    settings: Any = None,
) -> int:
    """Cross-checks an attention implementation against flashattn's fp64 oracle on problems drawn
    by Hypothesis (flashattn.testing.strategies), judging every output by the tolerance rule.

    forward(q, k, v, **options) returns out, or (out, lse) with lse float32 [B, Hq, Nq] (None: lse
    is not judged); backward(dout, q, k, v, out, lse, **options) returns (dq, dk, dv). Arrays are
    [B, N, H, d] ("bshd" indexing, possibly strided; varlen: [total, H, d]) numpy arrays
    (framework="numpy"; bfloat16 from ml_dtypes) or CPU torch tensors (framework="torch"); only the
    options in use are passed (see Supports for their meaning). The backward gets the oracle's
    out (rounded to the dtype) and fp32 lse. `supports` restricts what is drawn.

    Returns the number of problems checked. On a failure, raises AttentionCheckFailed with the
    shrunk case (Hypothesis shrinks shapes and options), what it is, and the rule's verdict.
    seed: a fixed seed makes the run reproducible (None: Hypothesis' random seed)."""
    from hypothesis import HealthCheck, given
    from hypothesis import seed as hyp_seed
    from hypothesis import settings as hyp_settings

    supports = dataclasses.replace(supports, backward=backward is not None)
    count = [0]
    last: list[Problem | None] = [None]

    def one(p: Problem) -> None:
        last[0] = p
        conv = lambda x: _convert(framework, x)  # noqa: E731
        opts = {k: conv(v) for k, v in p.options.items()}
        result = forward(conv(p.q), conv(p.k), conv(p.v), **opts)
        try:
            assert_close(result, p.q, p.k, p.v, **p.options)
            if backward is not None:
                out, lse = reference.forward_rounded(p.q, p.k, p.v, **p.options)
                grads = backward(conv(p.dout), conv(p.q), conv(p.k), conv(p.v), conv(out), conv(lse), **opts)
                assert_close(grads, p.q, p.k, p.v, dout=p.dout, out=out, lse=lse, **p.options)
        except AttentionMismatch as e:
            raise AttentionMismatch(f"{e}\n  case: {_describe(p)}", e.verdicts) from None
        count[0] += 1

    s = settings or hyp_settings(max_examples=max_examples, deadline=None, database=None,
                                 suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much,
                                                        HealthCheck.data_too_large])
    test = given(attention_problems(supports))(one)
    test = s(test)
    if seed is not None:
        test = hyp_seed(seed)(test)
    try:
        test()
    except Exception as e:  # the shrunk failure: Hypothesis re-raises it after replaying the minimal case
        p = last[0]
        raise AttentionCheckFailed(
            f"check_attention: {type(e).__name__} on the shrunk case\n  {p!r}\n  {_describe(p) if p else ''}\n{e}", p
        ) from e
    return count[0]
