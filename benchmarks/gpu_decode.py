#!/usr/bin/env python3
"""flashattn::gpu decoding over a KV cache, against the GPU's copy bandwidth and PyTorch's SDPA.

Cases: bf16 q, Hq = 32, Hk = 8, d = 128, one new query row per sequence (Nq = 1), batch B = 1, 8,
64, cache lengths Nk = 4k .. 128k (cases whose bf16 K + V exceed --max-gib are left out), the cache
bf16 and int8 (codes with an fp32 scale per token and head: flashattn's quantized kernel), contiguous
([B, Nk, Hk, d]) and paged (page pools through a shuffled block table, --page-size; int8 scales
paged beside their rows). GB/s counts the bytes a step must read (K and V, plus the int8 scales)
over the step's time; "% copy" is
that against the copy bandwidth measured first (a device-to-device copy of --copy-gib: read +
write bytes over its time), the ceiling a streaming kernel can approach. PyTorch's SDPA
(enable_gqa, its flash / cuDNN / efficient backends, each where it runs) reads the contiguous
cache as [B, Hk, Nk, d] views, the same bytes.

Every case is checked before it is timed: flashattn's output against the first SDPA backend that
runs (for int8, on the bf16 values the codes stand for), within a bf16 tolerance (a mismatch exits
non-zero). PyTorch is timed on the bf16 caches only. Timing: CUDA events, warm-up first,
median and min of the repetitions; a flashattn step includes its per-call validation (with
seqlens_k it copies that device array to the host and synchronises once per call, docs/gpu.md).

Usage: gpu_decode.py --lib build/gpu/libflashattn_gpu_capi.so [--quick] [--markdown out.md]
"""
import argparse
import ctypes
import datetime
import subprocess
import sys

import torch
import torch.nn.functional as F

from sdpa_compare import sdpa_backends, time_ms  # CUDA-event timing and the SDPA backends, shared

try:
    from torch.nn.attention import sdpa_kernel
except ImportError:  # PyTorch < 2.3: sdpa_backends() then offers only the default
    sdpa_kernel = None

HQ, HK, D = 32, 8, 128
DTYPE_CODE = {torch.float16: 0, torch.bfloat16: 1}


def load(lib_path):
    lib = ctypes.CDLL(lib_path)
    p, i = ctypes.c_void_p, ctypes.c_int
    lib.flashattn_gpu_decode.argtypes = [p, p, p, p] + [i] * 8 + [p, p, i, i, p, i, p, p]
    lib.flashattn_gpu_last_error.restype = ctypes.c_char_p
    return lib


def copy_gbs(gib, reps):
    """Device-to-device copy bandwidth: (read + write bytes) / time, best of the repetitions."""
    n = int(gib * 2**30)
    x = torch.empty(n, dtype=torch.uint8, device="cuda")
    y = torch.empty_like(x)
    _, best = time_ms(lambda: y.copy_(x), reps)
    del x, y
    return 2 * n / (best * 1e-3) / 1e9


class Decode:
    """One decode step of flashattn over a contiguous or paged cache."""

    def __init__(self, lib, q, k, v, seqlens, table=None, page=0, scales=None):
        self.lib, self.q, self.k, self.v, self.seqlens, self.table = lib, q, k, v, seqlens, table
        self.scales = scales  # (k_scale, v_scale) per token and head when k, v are int8 codes
        B, Nq, Hq, d = q.shape
        self.out = torch.empty_like(q)
        rows, cap = k.shape[0], k.shape[1]
        self.dims = (B, Nq, rows, cap, Hq, k.shape[2], d, DTYPE_CODE[q.dtype])
        self.table_pages = table.shape[1] if table is not None else 0

    def __call__(self):
        s = torch.cuda.current_stream().cuda_stream
        tp = self.table.data_ptr() if self.table is not None else None
        ks, vs = (x.data_ptr() for x in self.scales) if self.scales is not None else (None, None)
        rc = self.lib.flashattn_gpu_decode(self.q.data_ptr(), self.k.data_ptr(), self.v.data_ptr(), self.out.data_ptr(),
                                           *self.dims, self.seqlens.data_ptr(), tp, self.table_pages, 0, s,
                                           int(self.scales is not None), ks, vs)
        if rc != 0:
            raise RuntimeError(self.lib.flashattn_gpu_last_error().decode())


def sdpa_step(backend, q, k, v):
    """A closure running SDPA on [B, H, N, d] views of the bshd tensors, or None where it does not run."""
    qt, kt, vt = q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2)

    def step():
        if backend is None:
            return F.scaled_dot_product_attention(qt, kt, vt, enable_gqa=True)
        with sdpa_kernel(backend):
            return F.scaled_dot_product_attention(qt, kt, vt, enable_gqa=True)

    try:
        out = step()
        torch.cuda.synchronize()
    except (RuntimeError, TypeError):
        return None, None
    return step, out.transpose(1, 2)


def paged(k, v, page, order=None):
    """The cache as page pools [pages, page, Hk, ...] in a shuffled order (or `order`) and the block table."""
    B, N, Hk = k.shape[:3]
    per_seq = N // page
    if order is None:
        order = torch.randperm(B * per_seq, device=k.device)
    kp = torch.empty((B * per_seq, page) + tuple(k.shape[2:]), dtype=k.dtype, device=k.device)
    vp = torch.empty((B * per_seq, page) + tuple(v.shape[2:]), dtype=v.dtype, device=v.device)
    kp[order] = k.reshape((B * per_seq, page) + tuple(k.shape[2:]))
    vp[order] = v.reshape((B * per_seq, page) + tuple(v.shape[2:]))
    table = order.reshape(B, per_seq).to(torch.int32).contiguous()
    return kp, vp, table, order


def quantize_int8(x):
    """int8 codes of x [B, N, Hk, d] with one fp32 scale per (token, head): absmax / 127, round half
    to even, and the values they stand for (codes · scale, as bf16 for PyTorch's reference)."""
    scale = (x.float().abs().amax(dim=-1) / 127).clamp_min(1e-30)
    codes = torch.round(x.float() / scale[..., None]).clamp(-127, 127).to(torch.int8)
    return codes, scale.contiguous(), (codes.float() * scale[..., None]).to(x.dtype)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--lib", required=True, help="path to libflashattn_gpu_capi.so")
    ap.add_argument("--quick", action="store_true", help="Nk up to 65536, K + V up to 4 GiB, fewer repetitions")
    ap.add_argument("--reps", type=int, default=30)
    ap.add_argument("--page-size", type=int, default=16)
    ap.add_argument("--max-gib", type=float, default=16.0, help="leave out cases whose K + V exceed this")
    ap.add_argument("--copy-gib", type=float, default=2.0)
    ap.add_argument("--markdown", help="append a results table (with GPU, driver, date) to this file")
    args = ap.parse_args()
    if not torch.cuda.is_available():
        print("no CUDA device")
        return 77
    lib = load(args.lib)
    reps = 10 if args.quick else args.reps
    max_gib = min(args.max_gib, 4.0) if args.quick else args.max_gib
    lengths = [4096, 16384, 65536] + ([] if args.quick else [131072])
    dtype = torch.bfloat16
    gbs_copy = copy_gbs(args.copy_gib, reps)
    name = torch.cuda.get_device_name()
    print(f"{name}: copy bandwidth {gbs_copy:.0f} GB/s (read + write, {args.copy_gib} GiB, best of {reps})")
    backends = sdpa_backends()
    header = ["B", "Nk", "cache", "flashattn ms", "GB/s", "% copy"] + [f"{b} ms" for b in backends]
    rows, errors = [], []
    torch.manual_seed(0)
    for B in (1, 8, 64):
        for N in lengths:
            kv_bytes = 2 * B * N * HK * D * 2
            if kv_bytes > max_gib * 2**30:
                continue
            q = torch.randn(B, 1, HQ, D, device="cuda", dtype=dtype)
            k = torch.randn(B, N, HK, D, device="cuda", dtype=dtype)
            v = torch.randn(B, N, HK, D, device="cuda", dtype=dtype)
            seqlens = torch.full((B,), N, dtype=torch.int32, device="cuda")
            # int8 caches with a scale per token and head; PyTorch reads the values they stand for
            kq, ks, kd = quantize_int8(k)
            vq, vs, vd = quantize_int8(v)
            for cache, (kk, vv, scales, ref_k, ref_v) in (("bf16", (k, v, None, k, v)),
                                                           ("int8", (kq, vq, (ks, vs), kd, vd))):
                step_bytes = kv_bytes if scales is None else 2 * B * N * HK * (D + 4)
                ref, torch_ms = None, {}
                for bname, backend in backends.items():
                    step, out = sdpa_step(backend, q, ref_k, ref_v)
                    if step is None:
                        torch_ms[bname] = None
                        continue
                    if ref is None:
                        ref = out
                    torch_ms[bname] = time_ms(step, reps)[1] if cache == "bf16" else None
                order = None
                for layout in ("contiguous", f"paged {args.page_size}"):
                    if layout == "contiguous":
                        run = Decode(lib, q, kk, vv, seqlens, scales=scales)
                    else:
                        kp, vp, table, order = paged(kk, vv, args.page_size, order)
                        sp = None
                        if scales is not None:  # the scales live beside their rows, page by page
                            ksp, vsp, _, _ = paged(scales[0], scales[1], args.page_size, order)
                            sp = (ksp, vsp)
                        run = Decode(lib, q, kp, vp, seqlens, table, scales=sp)
                    run()
                    if ref is not None:
                        err = (run.out.float() - ref.float()).abs().max().item()
                        bound = 2e-2 * ref.float().abs().max().item() + 2e-3
                        if not err <= bound:
                            errors.append(f"B={B} Nk={N} {cache} {layout}: max |flashattn - torch| = {err:.3g} > {bound:.3g}")
                    _, best = time_ms(run, reps)
                    gbs = step_bytes / (best * 1e-3) / 1e9
                    cells = [str(B), str(N), f"{cache} {layout}", f"{best:.3f}", f"{gbs:.0f}", f"{100 * gbs / gbs_copy:.0f} %"]
                    cells += ["-" if layout != "contiguous" or torch_ms[b] is None else f"{torch_ms[b]:.3f}" for b in backends]
                    rows.append(cells)
                    print(" | ".join(cells), flush=True)
                    del run
            del q, k, v, kq, vq, kd, vd
            torch.cuda.empty_cache()
    table = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)] + ["| " + " | ".join(r) + " |" for r in rows]
    if args.markdown:
        driver = subprocess.run(["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"],
                                capture_output=True, text=True).stdout.strip()
        when = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
        with open(args.markdown, "a") as fh:
            fh.write(f"Decode: flashattn-gpu vs PyTorch SDPA — {name}, driver {driver}, torch {torch.__version__}, {when}; "
                     f"bf16 q, bf16 and int8 caches, Hq = {HQ}, Hk = {HK}, d = {D}, Nq = 1; copy bandwidth {gbs_copy:.0f} GB/s; min of {reps} "
                     f"(ms); GB/s = K + V bytes / time.\n\n" + "\n".join(table) + "\n\n")
    for e in errors:
        print("MISMATCH", e, file=sys.stderr)
    return 1 if errors else 0


if __name__ == "__main__":
    sys.exit(main())
