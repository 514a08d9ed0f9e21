"""PyTorch's own CPU scaled_dot_product_attention (flash and math backends, chosen with
torch.nn.attention.sdpa_kernel) checked by flashattn.testing: a kernel nobody here wrote.
What it supports passes; the two disagreements found are pinned as findings (docs/python.md,
"PyTorch's CPU SDPA against the oracle"): if PyTorch changes, these tests say so."""
from __future__ import annotations

import warnings

import pytest

torch = pytest.importorskip("torch")

import sdpa  # noqa: E402
from flashattn.testing import AttentionCheckFailed, Supports, check_attention  # noqa: E402

# SDPA has causal (bottom-right through causal_lower_right for Nq != Nk), scale and GQA
# (enable_gqa); no windows, softcap, ALiBi slopes, key lengths, varlen or dv != d in this mapping.
SDPA = Supports(window=False, softcap=False, alibi=False, seqlens_k=False, varlen=False, dv=False)
POSITIVE_SCALES = (0.5, 1.0, 2.0)


@pytest.fixture(autouse=True)
def _quiet():
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message="Lower right causal bias")
        yield


def run(backend, **supports):
    return check_attention(sdpa.forward(backend), sdpa.backward(backend), supports=Supports(**{**SDPA.__dict__,
                                                                                              **supports}),
                           framework="torch", max_examples=60)


@pytest.mark.parametrize("dtype", ["f32", "f16", "bf16"])
def test_math_backend_passes(dtype):
    assert run("math", dtypes=(dtype,)) == 60


@pytest.mark.parametrize("dtype", ["f16", "bf16"])
def test_flash_backend_passes_16_bit_with_positive_scales(dtype):
    assert run("flash", dtypes=(dtype,), scales=POSITIVE_SCALES) == 60


def test_flash_backend_passes_f32_moderate_scores():
    assert run("flash", dtypes=("f32",), scales=POSITIVE_SCALES, values=("normal", "uniform")) == 60


def test_finding_flash_causal_with_non_positive_scale_gives_nan():
    """Finding 1: flash + is_causal + scale <= 0 -> NaN in every row but the last (math is right)."""
    with pytest.raises(AttentionCheckFailed) as e:
        run("flash", dtypes=("f32",), scales=(-0.3, 0.0), gqa=False, cross_lengths=False, layouts=("bshd",),
            values=("normal",))
    p = e.value.problem.params
    assert p["causal"] and p["scale"] in (-0.3, 0.0) and "out: non-finite value" in str(e.value)
    assert p["nq"] == [2] and p["nk"] == [2], p  # shrunk to two rows: row 0 is NaN, row 1 is right


def test_finding_flash_f32_backward_dv_at_large_scores():
    """Finding 2: flash f32 backward, |S| ~ 1e3: dv off by ~2x the rule's bound (the backward's P
    comes from its own fp32 lse; the forward's out and lse pass)."""
    with pytest.raises(AttentionCheckFailed) as e:
        run("flash", dtypes=("f32",), scales=POSITIVE_SCALES, values=("large",), gqa=False, causal=False,
            cross_lengths=False, layouts=("bshd",), scale=False)
    msg = str(e.value)
    assert "backward result disagrees" in msg and "  dv: max |impl - oracle|" in msg, msg
    assert "  dq:" not in msg and "  dk:" not in msg
