"""GPU figures: the current scripts/gpu-check run (README, docs/gpu.md, RESULTS.md) and the H200 run."""
import os
import re

from . import block, md_rows, path, read, span, table

H100 = "benchmarks/results/2026-11-26/h100-quick-16870d0"  # the current GPU run: a new one replaces it
H200 = "benchmarks/results/2026-11-26/h200-paired-dq-atomics"
IMPLS = ("flashattn-gpu", "torch-flash", "torch-cudnn")


def sdpa_rows(bench):
    """{(d, causal, N, pass, impl): TFLOP/s} of a benchmarks/sdpa_compare.py table, and its title."""
    title = next((l[4:].strip() for l in read(bench).splitlines() if l.startswith("### ")), "")
    rows = {}
    for c in md_rows(bench):
        if len(c) >= 10 and c[0].isdigit():
            rows[(int(c[0]), int(c[1]), int(c[2]), c[5], c[6])] = float(c[9])
    if not rows:
        raise ValueError(f"no result rows in {bench}")
    return title, rows


def commit_of(run):
    info = path(f"{run}/build-info.txt")
    if not os.path.exists(info):
        return "?"
    with open(info) as fh:
        return fh.readline().split()[-1][:7]


def sdpa_table(bench, commit):
    """The whole sdpa_compare table: flashattn-gpu's TFLOP/s (bold) with its ratio to torch-flash."""
    title, rows = sdpa_rows(bench)
    seqlens = sorted({k[2] for k in rows})
    body = []
    for d in sorted({k[0] for k in rows}):
        for causal in (0, 1):
            for p in ("fwd", "bwd"):
                for impl in IMPLS:
                    cells = []
                    for n in seqlens:
                        tf, ref = rows.get((d, causal, n, p, impl)), rows.get((d, causal, n, p, "torch-flash"))
                        cells.append("-" if tf is None else
                                     f"**{tf:.0f}** ({tf / ref:.2f})" if impl == "flashattn-gpu" and ref else f"{tf:.0f}")
                    body.append([d, causal, p, impl] + cells)
    head = f"Measured: {title}; kernels of commit {commit} (`{bench}`)."
    return head + "\n\n" + table(["d", "causal", "pass", "impl"] + [f"N={n}" for n in seqlens], body)


@block("gpu-measured", f"{H100}/bench.md", f"{H100}/build-info.txt")
def gpu_measured():
    return sdpa_table(f"{H100}/bench.md", commit_of(H100))


@block("gpu-h100-ceilings", f"{H100}/ceilings.txt")
def gpu_h100_ceilings():
    return "```\n" + read(f"{H100}/ceilings.txt").rstrip("\n") + "\n```"


@block("gpu-h200-table", f"{H200}/bench.md")
def gpu_h200_table():
    return sdpa_table(f"{H200}/bench.md", "651a546 with the paired dQ atomics, not committed as run")


@block("readme-gpu", f"{H100}/bench.md", f"{H100}/build-info.txt", f"{H100}/ncu.txt")
def readme_gpu():
    title, rows = sdpa_rows(f"{H100}/bench.md")
    n = max(k[2] for k in rows)

    def pair(d, p, impl, causals=(0, 1)):
        return " / ".join(f"{rows[(d, c, n, p, impl)]:.0f}" for c in causals)

    body = [[f"{p}, non-causal / causal"] + [pair(128, key, i) for i in IMPLS]
            for p, key in (("forward", "fwd"), ("backward", "bwd"))]
    body.append(["d = 64: forward / backward (non-causal)"] +
                [f"{rows[(64, 0, n, 'fwd', i)]:.0f} / {rows[(64, 0, n, 'bwd', i)]:.0f}" for i in IMPLS])

    def ratios(p, impl="flashattn-gpu", ref="torch-flash"):
        return [rows[k] / rows[k[:4] + (ref,)] for k in rows if k[3] == p and k[4] == impl]

    cycles = {k: v['cpi'] for k, v in ncu_metrics(H100).items()}
    text = table([f"d = 128, N = {n}", "flashattn-gpu", "PyTorch flash (FA2)", "PyTorch cuDNN"], body)
    text += (f"\n\n{speed_summary()} Nsight Compute at d = 128, N = 8192: {cycles['forward_kernel']:.1f} (forward) and "
             f"{cycles['backward_kernel']:.1f} (backward) cycles per issued instruction, FA2's forward "
             f"{cycles['flash_fwd_kernel']:.1f}.")
    return text


def speed_summary():
    """One sentence: flashattn-gpu against FA2 and cuDNN over the current run's whole table."""
    _, rows = sdpa_rows(f"{H100}/bench.md")

    def ratios(p, impl="flashattn-gpu"):
        return [rows[k] / rows[k[:4] + ("torch-flash",)] for k in rows if k[4] == impl and (p is None or k[3] == p)]
    seqlens, dims = sorted({k[2] for k in rows}), sorted({k[0] for k in rows})
    return (f"Speed on the H100 (bf16, d = {'/'.join(map(str, dims))}, N = {seqlens[0] // 1024}k-{seqlens[-1] // 1024}k, "
            f"causal and not; kernels of commit {commit_of(H100)}): {span(ratios('fwd'))}× PyTorch's FlashAttention-2 "
            f"backend forward, {span(ratios('bwd'))}× backward, on `mma.sync`; cuDNN's SDPA (on Hopper's `wgmma`) is "
            f"{span(ratios(None, 'torch-cudnn'), '{:.1f}')}× FA2.")


@block("gpu-speed", f"{H100}/bench.md", f"{H100}/build-info.txt")
def gpu_speed():
    return speed_summary()


def ncu_metrics(run, name="ncu.txt"):
    """{kernel: {metric: value}} of an Nsight Compute report (first profile of each kernel; the
    values of the metrics used here and by scripts/gpu-model --calibrate: instructions, cycles per
    issue, tensor pipe %, L2 %, registers, duration in ms, elapsed cycles, achieved warps per SM)."""
    wanted = {"Executed Instructions": "instructions", "Warp Cycles Per Issued Instruction": "cpi",
              "sm__pipe_tensor_op_hmma_cycles_active.avg.pct_of_peak_sustained_active": "tensor",
              "L2 Cache Throughput": "l2", "Registers Per Thread": "registers", "Duration": "duration",
              "Elapsed Cycles": "cycles", "Achieved Active Warps Per SM": "warps"}
    out, kernel = {}, None
    for line in read(f"{run}/{name}").splitlines():
        m = re.match(r"\s+void ([\w:]+?)(?:<|\()", line)
        if m and "Context" in line:
            kernel = m.group(1).split("::")[-1]
            fresh = kernel not in out
            out.setdefault(kernel, {})
            continue
        if not kernel or not fresh:
            continue
        for label, key in wanted.items():
            m = re.match(rf"\s+{re.escape(label)}\s+(\S+)\s+([\d,.]+)\s*$", line)
            if m and key not in out[kernel]:
                v = float(m.group(2).replace(",", ""))
                out[kernel][key] = v * 1e-3 if key == "duration" and m.group(1) == "us" else v
    return out


def profile_tflops(run):
    """{(d, causal): {pass label: TFLOP/s}} of a benchmarks/gpu_profile.py report."""
    out, shape = {}, None
    for line in read(f"{run}/profile.md").splitlines():
        m = re.match(r"## d=(\d+) causal=(\d)", line)
        if m:
            shape = (int(m.group(1)), int(m.group(2)))
            out[shape] = {}
        elif shape and line.startswith("| ") and not line.startswith("| pass"):
            c = [x.strip() for x in line.strip().strip("|").split("|")]
            out[shape][c[0]] = float(c[5])
    return out


@block("gpu-where-time-goes", f"{H100}/ncu.txt", f"{H100}/profile.md")
def gpu_where_time_goes():
    k = ncu_metrics(H100)
    f, b, fa_f, fa_b = (k[n] for n in ("forward_kernel", "backward_kernel", "flash_fwd_kernel",
                                       "flash_bwd_dq_dk_dv_loop_seqk_parallel_kernel"))
    det = [v["flashattn bwd deterministic"] / v["flashattn bwd"] for v in profile_tflops(H100).values()]
    return (f"- Forward: {f['instructions'] / 1e9:.3g} G instructions against FA2's {fa_f['instructions'] / 1e9:.3g} G, "
            f"but {f['cpi']:.2f} cycles per issued instruction against FA2's {fa_f['cpi']:.2f} ({f['registers']:.0f} and "
            f"{fa_f['registers']:.0f} registers per thread; ours reloads spilled loop invariants every tile); tensor pipe {f['tensor']:.0f} % active (FA2 {fa_f['tensor']:.0f} %).\n"
            f"- Backward (atomic dQ): {b['instructions'] / 1e9:.3g} G instructions against FA2's {fa_b['instructions'] / 1e9:.3g} G, "
            f"{b['cpi']:.2f} cycles per instruction (FA2 {fa_b['cpi']:.2f}), L2 {b['l2']:.0f} % busy, tensor pipe "
            f"{b['tensor']:.0f} % (FA2 {fa_b['tensor']:.0f} %); the dK/dV kernel {b['duration']:.1f} ms, FA2's fused kernel "
            f"{fa_b['duration']:.1f}.\n"
            f"- Deterministic backward: the dq kernel (recomputing S and dP per query block) takes about as long as the "
            f"dK/dV kernel: {span(det)}× the atomic mode's throughput at N = 8192.")


H200_CEILINGS = f"{H200}/ceilings.md"


@block("gpu-h200-profile", f"{H200}/profile.md", H200_CEILINGS)
def gpu_h200_profile():
    prof = profile_tflops(H200)
    share = []
    for line in read(f"{H200}/profile.md").splitlines():
        if line.startswith("| flashattn bwd |") and "backward_kernel" in line:
            c = [x.strip() for x in line.strip().strip("|").split("|")]
            share.append(int(c[4].rstrip("%")))
    ms = next(float(x.strip().strip("|").split("|")[2]) for x in read(f"{H200}/profile.md").split("## d=128 causal=0")[1]
              .splitlines() if x.startswith("| flashattn bwd |") and "backward_kernel" in x) / 1e3
    det = {s: v["flashattn bwd deterministic"] for s, v in prof.items()}
    return (f"Per-kernel time at N = 8192 (`benchmarks/gpu_profile.py`, same run, `profile.md`): the dK/dV kernel is "
            f"{min(share)}-{max(share)} % of the backward (d = 128: {ms:.1f} ms non-causal); the deterministic backward "
            f"(dK/dV kernel + `dq_kernel`) takes {det[(128, 0)]:.0f} / {det[(128, 1)]:.0f} TFLOP/s at d = 128 "
            f"(non-causal / causal), {det[(64, 0)]:.0f} / {det[(64, 1)]:.0f} at d = 64. Nsight Compute counters of the "
            f"same build: `ncu-detail.txt`.")


@block("gpu-h200-ceilings", H200_CEILINGS)
def gpu_h200_ceilings():
    text = read(H200_CEILINGS)
    return text[text.index("\n- ") + 1:]
