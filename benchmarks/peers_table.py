#!/usr/bin/env python3
"""One side-by-side table and plot of flashattn (cpu), the standard baseline and PyTorch's CPU SDPA
(flash, math) from the JSON files of benchmarks/peers.sh (flashattn-bench and torch_cpu_sdpa.py runs
of the same cases on the same machine).

Several runs may be given (peers.sh RUNS=n): per case and implementation the fastest run counts (the
host is shared; see merge_runs.py), and every implementation's best is compared with the others'.
The peaks are the highest any flashattn-bench run measured. A case whose check failed in any run is
marked FAIL. Ratios are PyTorch flash time / flashattn cpu time: > 1 means flashattn is faster.

Usage: peers_table.py FILE.json ... [--markdown OUT.md] [--plot PREFIX]   (PREFIX.png via gnuplot)
"""
import argparse
import json
import os
import subprocess

IMPLS = ["cpu", "standard", "torch-flash", "torch-math"]


def case_key(r):
    return (r["pass"], r["dtype"], r["batch"], r["heads_q"], r["seqlen_q"], r["head_dim"], bool(r["causal"]))


def load(paths):
    """Returns (machine facts, {case: {impl: best record}}, failed {(case, impl)})."""
    machine, best, failed = {}, {}, set()
    for path in paths:
        with open(path) as f:
            j = json.load(f)
        m = j.get("machine", {})
        if "torch_version" in m:
            machine["torch"] = f"{m['torch_version']} ({m.get('torch_cpu_capability', '')})"
        else:  # a flashattn-bench run: it measured the peaks
            for k in ("cpu_model", "l1d_bytes", "l2_bytes", "threads", "simd_target", "blas_core"):
                machine[k] = m.get(k, machine.get(k))
            for k in ("peak_gflops", "bf16_peak_gflops"):
                machine[k] = max(machine.get(k, 0), m.get(k, 0))
            machine.setdefault("load_average", []).append(m.get("load_average", 0))
        for r in j["results"]:
            if r["impl"] not in IMPLS or r["block_q"] or r["block_k"]:
                continue
            c = case_key(r)
            if r["status"] != "ok":
                continue
            if not r["check_passed"]:
                failed.add((c, r["impl"]))
            cur = best.setdefault(c, {}).get(r["impl"])
            if cur is None or r["ms_min"] < cur["ms_min"]:
                best[c][r["impl"]] = r
    return machine, best, failed


def peak_for(machine, dtype):
    bf16 = machine.get("bf16_peak_gflops", 0)
    return bf16 if dtype == "bf16" and bf16 > 0 else machine.get("peak_gflops", 0)


def table(machine, best, failed):
    head = ["pass", "dtype", "N", "d", "mask"]
    for i in IMPLS:
        head += [f"{i} ms", f"{i} %pk"]
    head += ["torch-flash / cpu", "cpu err", "torch-flash err"]
    rows = []
    for c in sorted(best, key=lambda c: (c[0] != "fwd", c[1] != "f32", c[4], c[5], c[3])):
        ps, dt, _, _, n, d, causal = c
        row = [ps, dt, str(n), str(d), "causal" if causal else "none"]
        peak = peak_for(machine, dt)
        for i in IMPLS:
            r = best[c].get(i)
            if r is None:
                row += ["-", "-"]
                continue
            mark = " FAIL" if (c, i) in failed else ""
            row += [f"{r['ms_min']:.1f}{mark}", f"{100 * r['gflops'] / peak:.0f}" if peak else "-"]
        cpu, tf = best[c].get("cpu"), best[c].get("torch-flash")
        row.append(f"{tf['ms_min'] / cpu['ms_min']:.2f}x" if cpu and tf else "-")
        row.append(f"{cpu['check_max_err']:.1e} ({cpu['check_against']})" if cpu else "-")
        row.append(f"{tf['check_max_err']:.1e}" if tf else "-")
        rows.append(row)
    return head, rows


def markdown(machine, head, rows):
    bf16 = machine.get("bf16_peak_gflops", 0)
    lines = [f"CPU {machine.get('cpu_model')}, L1d {machine.get('l1d_bytes', 0) // 1024} KiB, "
             f"L2 {machine.get('l2_bytes', 0) // 1024} KiB per core, {machine.get('threads')} threads, "
             f"SIMD {machine.get('simd_target')}; fp32 FMA peak {machine.get('peak_gflops', 0):.0f} GFLOP/s, "
             f"bf16 dot peak {bf16:.0f} GFLOP/s" + ("" if bf16 else " (no AVX512_BF16)") +
             f"; PyTorch {machine.get('torch', 'not run')}; load average at start "
             + ", ".join(f"{x:.1f}" for x in machine.get("load_average", [])) + ".",
             "",
             "%pk: GFLOP/s against the fp32 FMA peak for f32 rows, the bf16 dot peak for bf16 rows. "
             "ms: the fastest call (minimum over repetitions and runs). err: max abs error of the case's check "
             "(flashattn: against the reference named; PyTorch: against its float64 math backend, heads 0-1).",
             "",
             "| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    lines += ["| " + " | ".join(r) + " |" for r in rows]
    return "\n".join(lines) + "\n"


def plot(prefix, machine, best):
    """Clustered bars of GFLOP/s per case and implementation, forward and backward panels."""
    cases = sorted(best, key=lambda c: (c[1] != "f32", c[4], c[5], c[3]))
    dat = prefix + ".dat"
    with open(dat, "w") as f:
        for ps in ("fwd", "bwd"):  # columns: case label, then GFLOP/s of each of IMPLS
            for c in cases:
                if c[0] != ps:
                    continue
                label = f"{c[1]}-N{c[4]}-d{c[5]}{'-c' if c[6] else ''}"
                vals = [f"{best[c][i]['gflops']:.2f}" if i in best[c] else "NaN" for i in IMPLS]
                f.write(label + " " + " ".join(vals) + "\n")
            f.write("\n\n")
    fp32, bf16 = machine.get("peak_gflops", 0), machine.get("bf16_peak_gflops", 0)
    top = 1.1 * max([fp32, bf16] + [r["gflops"] for c in cases for r in best[c].values()])
    gp = prefix + ".gp"
    # The script names its files relative to its own folder (gnuplot runs there), so it holds no
    # path of the machine that wrote it.
    here = os.path.dirname(gp) or "."
    with open(gp, "w") as g:
        g.write(f"""set terminal pngcairo size 1400,1000 font ',10' noenhanced
set output '{os.path.basename(prefix)}.png'
set multiplot layout 2,1 title '{machine.get("cpu_model")}, {machine.get("threads")} threads: fp32 FMA peak {fp32:.0f} (dashed), bf16 dot peak {bf16:.0f} GFLOP/s (dotted); -c = causal'
set style data histograms
set style histogram clustered gap 1
set style fill solid 0.8 border -1
set boxwidth 0.9
set xtics rotate by -45 scale 0
set grid ytics
set ylabel 'GFLOP/s'
set key top left
set yrange [0:{top:.0f}]
""")
        for i, ps in enumerate(("fwd", "bwd")):
            g.write(f"set title '{'forward' if ps == 'fwd' else 'backward'}'\n")
            g.write(f"set arrow 1 from graph 0, first {fp32} to graph 1, first {fp32} nohead dt 2 front\n")
            if bf16:
                g.write(f"set arrow 2 from graph 0, first {bf16} to graph 1, first {bf16} nohead dt 3 front\n")
            cols = ", ".join(f"'' index {i} using {k + 2}:xtic(1) title '{name}'" if k else
                             f"'{os.path.relpath(dat, here)}' index {i} using {k + 2}:xtic(1) title '{name}'" for k, name in enumerate(IMPLS))
            g.write(f"plot {cols}\n")
        g.write("unset multiplot\n")
    subprocess.run(["gnuplot", os.path.basename(gp)], cwd=here, check=True)
    print(f"plot: wrote {prefix}.png")


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("files", nargs="+")
    ap.add_argument("--markdown", default="")
    ap.add_argument("--plot", default="")
    a = ap.parse_args()
    machine, best, failed = load(a.files)
    head, rows = table(machine, best, failed)
    md = markdown(machine, head, rows)
    print(md)
    if a.markdown:
        with open(a.markdown, "w") as f:
            f.write(md)
    if a.plot:
        plot(a.plot, machine, best)
    return 1 if failed else 0


if __name__ == "__main__":
    raise SystemExit(main())
