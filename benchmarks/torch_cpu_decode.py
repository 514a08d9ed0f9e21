#!/usr/bin/env python3
"""Times PyTorch's CPU scaled_dot_product_attention on flashattn-bench --decode's cases (one decoding
step of B sequences over a KV cache of Nk keys, Hq query heads over Hk key/value heads, GQA through
enable_gqa=True), flash and math backends, reported as flashattn-bench --decode reports: GB/s of K
and V read (B·Hk·Nk·2d·element size over the fastest call) and tokens/s per sequence (Nq / time).

PyTorch is not a dependency of flashattn: benchmarks/decode_peers.sh installs it into a virtual
environment of its own and runs this script with that environment's python.

  torch_cpu_decode.py --cache-len 16384,65536 --batch 1,8 --dtype f32,bf16 --threads 2 --csv torch.csv

Cache layouts, per case:
- bshd: the cache in flashattn's [B, Nk, Hk, d] memory, passed as the [B, Hk, Nk, d] view PyTorch
  expects (the same bytes flashattn reads);
- bhsd: a contiguous [B, Hk, Nk, d] copy, the layout PyTorch's kernels prefer.
Query rows: --new-rows Nq (1 for plain decoding; 2-8 a speculative step). With Nq > 1 the mask is
PyTorch's is_causal, top-left aligned, where flashattn's decode is bottom-right aligned (each new row
sees the whole cache): for Nq > 1 this script uses an explicit boolean mask with the bottom-right
alignment instead, so both libraries compute the same attention.

Check (reported; a case fails when it is too far off): the output of sequence 0 against PyTorch's
math backend in float64 on the same inputs, with the bound flashattn-bench uses for a check against
another fp32 implementation, c * (4 u(dtype) [dtype != f32] + (16 + sqrt(Nq + Nk)) u(f32)) * max|x64|,
c = 2 (docs/benchmarks.md, "Checks").
"""
import argparse
import csv
import math

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

from torch_cpu_sdpa import time_ms  # the same timing loop as the training-shape peers

BACKENDS = {"flash": SDPBackend.FLASH_ATTENTION, "math": SDPBackend.MATH}
DTYPES = {"f32": torch.float32, "bf16": torch.bfloat16}
UNIT_ROUNDOFF = {"f32": 2.0**-24, "bf16": 2.0**-8}


def ints(s):
    return [int(x) for x in s.split(",") if x]


def bottom_right_mask(nq, nk):
    """None for one row; else [Nq, Nk] booleans: row i sees keys 0 .. Nk - Nq + i."""
    if nq == 1:
        return None
    i = torch.arange(nq).unsqueeze(1)
    j = torch.arange(nk).unsqueeze(0)
    return j <= (nk - nq) + i


def attend(q, k, v, mask):
    return F.scaled_dot_product_attention(q, k, v, attn_mask=mask, enable_gqa=True)


def check(backend, q, k, v, mask, dtype_name, nq, nk):
    with torch.no_grad(), sdpa_kernel([BACKENDS[backend]]):
        got = attend(q[:1], k[:1], v[:1], mask).double()
    with torch.no_grad(), sdpa_kernel([SDPBackend.MATH]):
        ref = attend(q[:1].double(), k[:1].double(), v[:1].double(), mask)
    err = (got - ref).abs().max().item()
    own = 4 * UNIT_ROUNDOFF[dtype_name] if dtype_name != "f32" else 0
    bound = 2 * (own + (16 + math.sqrt(nq + nk)) * UNIT_ROUNDOFF["f32"]) * ref.abs().max().item()
    return err, bound


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--cache-len", default="4096,16384,65536")
    ap.add_argument("--batch", default="1,8")
    ap.add_argument("--dtype", default="f32,bf16")
    ap.add_argument("--backend", default="flash,math")
    ap.add_argument("--layout", default="bshd,bhsd")
    ap.add_argument("--heads", type=int, default=32)
    ap.add_argument("--heads-k", type=int, default=8)
    ap.add_argument("--head-dim", type=int, default=128)
    ap.add_argument("--new-rows", type=int, default=1)
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--math-max-gib", type=float, default=2.0,
                    help="skip the math backend where its float score matrix and copies would pass this size")
    ap.add_argument("--csv", default="")
    a = ap.parse_args()
    torch.set_num_threads(a.threads)
    hq, hk, d, nq = a.heads, a.heads_k, a.head_dim, a.new_rows
    print(f"torch {torch.__version__} ({torch.backends.cpu.get_cpu_capability()}), {torch.get_num_threads()} threads; "
          f"Nq = {nq}, Hq = {hq}, Hk = {hk}, d = {d}")
    rows, failed = [], 0
    gen = torch.Generator().manual_seed(0)
    for dname in a.dtype.split(","):
        dt = DTYPES[dname]
        es = torch.tensor([], dtype=dt).element_size()
        for b in ints(a.batch):
            for nk in ints(a.cache_len):
                q = torch.randn(b, nq, hq, d, generator=gen).to(dt).transpose(1, 2)
                k_mem = (torch.rand(b, nk, hk, d, generator=gen) * 2 - 1).to(dt)
                v_mem = (torch.rand(b, nk, hk, d, generator=gen) * 2 - 1).to(dt)
                mask = bottom_right_mask(nq, nk)
                kv_bytes = 2.0 * b * nk * hk * d * es
                for layout in a.layout.split(","):
                    k, v = k_mem.transpose(1, 2), v_mem.transpose(1, 2)
                    if layout == "bhsd":
                        k, v = k.contiguous(), v.contiguous()
                    for backend in a.backend.split(","):
                        impl = f"torch-{backend}"
                        if backend == "math" and 4.0 * b * hq * nq * nk * 3 + 2 * kv_bytes * 4 / es > a.math_max_gib * 2**30:
                            print(f"{dname:5} B={b:<2} Nk={nk:<6} {layout:10} {impl:11} skipped (over --math-max-gib)")
                            continue
                        err, bound = check(backend, q, k, v, mask, dname, nq, nk)
                        with torch.no_grad(), sdpa_kernel([BACKENDS[backend]]):
                            times = time_ms(lambda: attend(q, k, v, mask), a.reps)
                        gbps = kv_bytes / (times[0] * 1e-3) * 1e-9
                        tok = nq / (times[0] * 1e-3)
                        ok = err <= bound
                        failed += not ok
                        status = f"{'PASS' if ok else 'FAIL'} err {err:.1e} <= {bound:.1e}"
                        print(f"{dname:5} B={b:<2} Nk={nk:<6} {layout:10} {impl:11} min {times[0]:9.3f} ms  "
                              f"{gbps:6.1f} GB/s  {tok:8.0f} tok/s/seq  {status}", flush=True)
                        rows.append(dict(dtype=dname, batch=b, nk=nk, new_rows=nq, layout=layout, impl=impl,
                                         median_ms=times[len(times) // 2], min_ms=times[0], gbps=gbps,
                                         tokens_per_s_per_seq=tok, tokens_per_s=tok * b, status=status,
                                         torch=torch.__version__))
                    del k, v
    if a.csv:
        with open(a.csv, "w", newline="") as f:
            w = csv.DictWriter(f, fieldnames=list(rows[0]))
            w.writeheader()
            w.writerows(rows)
    print(f"{len(rows)} timings: {failed} check failures")
    return 1 if failed else 0


if __name__ == "__main__":
    raise SystemExit(main())
