"""CPU figures of the Zen 5 development host: forward/backward against the materialised baseline, the
default set, scaling, tile sweeps, the AVX2 code forced on Zen 5 and against PyTorch; and the AVX2
code on a Zen 3 host against PyTorch."""
import csv
import io

from . import block, load_json, md_tables, read, span, table

TARGETS = [f"benchmarks/results/2026-11-23/targets/targets-{i}.json" for i in (1, 2, 3)]
DEFAULT = "benchmarks/results/default/default.json"
SWEEP = "benchmarks/results/2026-11-23/sweep"
AVX2_PEERS = "benchmarks/results/2026-11-27/peers-avx2-zen5/peers.md"
ZEN3_PEERS = "benchmarks/results/2026-11-29/peers-zen3/peers.md"
AVX2_KERNEL = "benchmarks/results/2026-11-27/avx2-kernel"
AVX2_BLOCKS = (("4 x 2", "block4x2"), ("6 x 2", "block6x2"), ("6 x 2 unrolled", "block6x2-unrolled"))


# ---- flashattn-bench JSON ------------------------------------------------------------------------

def peak_of(runs):
    """The highest FMA peak reading (before or after) of the runs."""
    return max(max(r["machine"]["peak_gflops_before"], r["machine"]["peak_gflops_after"]) for r in runs)


def case(r):
    return (r["impl"], r["pass"], r["dtype"], r["batch"], r["heads_q"], r["seqlen_q"], r["seqlen_k"],
            r["head_dim"], bool(r["causal"]), r["block_q"], r["block_k"])


def fastest(runs):
    """Per case, the result with the smallest ms_min over the runs (what benchmarks/merge_runs.py keeps)."""
    best = {}
    for run in runs:
        for r in run["results"]:
            if r["status"] == "ok" and (case(r) not in best or r["ms_min"] < best[case(r)]["ms_min"]):
                best[case(r)] = r
    return best


def failures(runs):
    """Check failures of the cases that ran (a skipped case carries no check)."""
    return sum(1 for run in runs for r in run["results"] if r["status"] == "ok" and r.get("check_passed") is False)


def find(best, impl, p, dtype, n, d, causal, **kw):
    hits = [r for k, r in best.items() if k[:3] == (impl, p, dtype) and k[5] == n and k[7] == d and k[8] == causal
            and all(r[f] == v for f, v in kw.items())]
    if len(hits) != 1:
        raise KeyError(f"{len(hits)} results for {impl} {p} {dtype} N={n} d={d} causal={causal} {kw}")
    return hits[0]


def pct(r, peak):
    return 100 * r["flops"] / (r["ms_min"] * 1e-3) / 1e9 / peak


def mem(n, gib_digits=2):
    """Bytes as the tables print them: KiB/MiB below 1 GiB (no decimal from 100 up), GiB with gib_digits."""
    for unit, size in (("GiB", 2 ** 30), ("MiB", 2 ** 20), ("KiB", 2 ** 10)):
        if n >= size or unit == "KiB":
            v = n / size
            if unit == "GiB":
                return f"{v:.{gib_digits}f} GiB"
            return f"{v:.0f} {unit}" if v >= 100 else f"{v:.1f} {unit}"


def ms3(ms):
    """Three significant digits, whole numbers kept whole (1451, 89.5, 6.27)."""
    return f"{ms:.0f}" if ms >= 100 else f"{ms:.3g}"


# ---- forward and backward against the materialised baseline (three runs merged) --------------------

@block("cpu-targets-zen5", *TARGETS)
def cpu_targets_zen5():
    runs = [load_json(f) for f in TARGETS]
    best, peak = fastest(runs), peak_of(runs)
    rows = []
    for d in (128, 64):
        for n in (1024, 4096):
            for causal in (False, True):
                for dt in ("f32", "bf16", "f16"):
                    cf, cb, sf, sb = (find(best, i, p, dt, n, d, causal) for i, p in
                                      (("cpu", "fwd"), ("cpu", "bwd"), ("standard", "fwd"), ("standard", "bwd")))
                    rows.append([d, n, "causal" if causal else "none", dt, f"{cf['ms_min']:.2f}", f"{pct(cf, peak):.1f}",
                                 f"{sf['ms_min']:.2f}", f"{cb['ms_min']:.2f}", f"{pct(cb, peak):.1f}", f"{sb['ms_min']:.2f}",
                                 f"{cb['ms_min'] / cf['ms_min']:.2f}", f"{mem(cf['extra_bytes'])} / {mem(cb['extra_bytes'])}",
                                 f"{mem(sf['extra_bytes'])} / {mem(sb['extra_bytes'])}"])
    head = (f"{len(runs)} runs, fastest per case; `%peak` against {peak:.0f} GFLOP/s, the highest of the runs' "
            f"{2 * len(runs)} FMA checks; {failures(runs)} check failures.")
    return head + "\n\n" + table(["d", "N", "mask", "dtype", "cpu fwd ms", "%peak", "std fwd ms", "cpu bwd ms", "%peak",
                                  "std bwd ms", "bwd/fwd", "cpu mem fwd / bwd", "std mem fwd / bwd"], rows)


@block("readme-cpu", *TARGETS)
def readme_cpu():
    runs = [load_json(f) for f in TARGETS]
    best, peak = fastest(runs), peak_of(runs)
    rows = []
    for dt, causal in (("f32", False), ("f32", True), ("bf16", False)):
        cf, cb, sf, sb = (find(best, i, p, dt, 4096, 128, causal) for i, p in
                          (("cpu", "fwd"), ("cpu", "bwd"), ("standard", "fwd"), ("standard", "bwd")))
        rows.append([f"{dt}, {'causal' if causal else 'no mask'}", f"{cf['ms_min']:.0f} ms ({pct(cf, peak):.0f} %)",
                     f"{sf['ms_min']:.0f} ms", f"{cb['ms_min']:.0f} ms ({pct(cb, peak):.0f} %)", f"{sb['ms_min']:.0f} ms",
                     f"{mem(cf['extra_bytes'])[:-4]} / {mem(cb['extra_bytes'])}, "
                     f"{mem(sf['extra_bytes'])} / {mem(sb['extra_bytes'], 1)}"])
    head = f"`%` = share of the measured 2-thread FMA peak ({peak:.0f} GFLOP/s)."
    return head + "\n\n" + table(["d = 128, N = 4096", "flashattn fwd", "standard fwd", "flashattn bwd", "standard bwd",
                                  "extra memory fwd / bwd: flashattn, standard"], rows)


# ---- the default set (scripts/run) ------------------------------------------------------------------

@block("cpu-default-zen5", DEFAULT)
def cpu_default_zen5():
    run = load_json(DEFAULT)
    best, m = fastest([run]), run["machine"]
    peak = peak_of([run])
    picks = [(i, p, "f32", 4, 4096, 128, c) for p in ("fwd", "bwd") for c in (False, True) for i in ("cpu", "standard")]
    picks += [("cpu", "fwd", "bf16", 8, 1024, 64, False), ("cpu", "bwd", "bf16", 8, 1024, 64, True)]
    rows = []
    for impl, p, dt, h, n, d, c in picks:
        r = find(best, impl, p, dt, n, d, c, heads_q=h)
        ms = r["ms_min"]
        rows.append([impl, p, dt, f"{r['batch']}·{h}", n, d, "causal" if c else "none", f"{ms:.1f}" if ms >= 10 else f"{ms:.2f}",
                     f"{r['flops'] / ms / 1e6:.1f}", f"{pct(r, peak):.1f}", mem(r["extra_bytes"])])
    head = (f"{len(run['results'])} cases, {failures([run])} check failures; FMA peak {m['peak_gflops_before']:.0f} "
            f"before, {m['peak_gflops_after']:.0f} after. Selected rows:")
    return head + "\n\n" + table(["impl", "pass", "dtype", "B·H", "N", "d", "mask", "min ms", "GFLOP/s", "%peak",
                                  "extra memory"], rows)


# ---- scaling and the tile sweep ------------------------------------------------------------------

@block("cpu-scaling-zen5", f"{SWEEP}/scaling.json", f"{SWEEP}/scaling-65536-forward.txt")
def cpu_scaling_zen5():
    run = load_json(f"{SWEEP}/scaling.json")
    m, results = run["machine"], run["results"]
    seqlens = sorted({r["seqlen_q"] for r in results})
    cell = {(r["pass"], bool(r["causal"]), r["head_dim"], r["impl"], r["seqlen_q"]): r for r in results}
    times, mems = [], []
    for p in ("fwd", "bwd"):
        for c in (False, True):
            for d in (64, 128):
                for impl in ("cpu", "standard"):
                    row = [p, "causal" if c else "none", d, impl]
                    for n in seqlens:
                        r = cell[(p, c, d, impl, n)]
                        row.append(f"{ms3(r['ms_min'])} ({r['flops'] / r['ms_min'] / 1e6:.0f})" if r["status"] == "ok"
                                   else "out of memory")
                    times.append(row)
    for p in ("fwd", "bwd"):
        for d in (64, 128):
            for impl in ("cpu", "standard"):
                row = [p, d, impl]
                for n in seqlens:
                    r = cell[(p, False, d, impl, n)]
                    need = r["status"].split("needs ")[-1].split(" of")[0] if "needs" in r["status"] else ""
                    row.append(mem(r["extra_bytes"], 1) if r["status"] == "ok" else f"needs {need}")
                mems.append(row)
    big = {}
    for line in read(f"{SWEEP}/scaling-65536-forward.txt").splitlines():
        if line.split()[1] == "cpu" and ": " in line and " ms," in line:
            big["causal" if line.rstrip().split(":")[0].endswith("causal") else "full"] = float(
                line.split(": ")[1].split(" ms")[0])
    flops64k = 4 * 8 * 65536 ** 2 * 64
    head = (f"FMA peak {m['peak_gflops_before']:.0f} before and {m['peak_gflops_after']:.0f} after the sweep; "
            f"{failures([run])} check failures. Time, min ms (GFLOP/s):")
    tail = (f"N = 65536, forward only (the baseline's forward needs 32 GiB and is refused; unchecked), from an "
            f"earlier, interrupted run of the same sweep with the same forward code at 2b528c8 (`scaling-65536-forward.txt`): "
            f"d = 64 {big['full'] / 1e3:.1f} s ({flops64k / big['full'] / 1e6:.0f} GFLOP/s), causal {big['causal'] / 1e3:.1f} s.")
    return "\n\n".join([head, table(["pass", "mask", "d", "impl"] + [str(n) for n in seqlens], times),
                        "Extra memory (bytes beyond inputs and outputs; the same with and without a causal mask):",
                        table(["pass", "d", "impl"] + [str(n) for n in seqlens], mems), tail])


def tile_sweep(results):
    """Per (pass, N, d, causal): the default's time, the best time and its (block_q, block_k)."""
    shapes = {}
    for r in results:
        if r["status"] != "ok":
            continue
        s = shapes.setdefault((r["pass"], r["seqlen_q"], r["head_dim"], bool(r["causal"])), {})
        t = (r["block_q"], r["block_k"])
        s[t] = min(s.get(t, float("inf")), r["ms_min"])
    return shapes


@block("cpu-tiles-zen5", f"{SWEEP}/tiles.json")
def cpu_tiles_zen5():
    run = load_json(f"{SWEEP}/tiles.json")
    shapes = tile_sweep(run["results"])
    rows, per_q = [], {}
    for p in ("fwd", "bwd"):
        for d in (64, 128):
            for c in (False, True):
                for n in (1024, 4096):
                    s = shapes[(p, n, d, c)]
                    best_t = min(s, key=s.get)
                    dflt = s[(0, 0)]
                    rows.append([p, n, d, "causal" if c else "none", "default" if best_t == (0, 0) else f"{best_t[0]}x{best_t[1]}",
                                 f"{s[best_t]:.2f}", f"{dflt:.2f}", f"+{100 * (dflt / s[best_t] - 1):.1f}%"])
                    for bq in {t[0] for t in s if t != (0, 0)}:
                        per_q.setdefault(bq, []).append(min(v for t, v in s.items() if t[0] == bq) / s[best_t])
    m = run["machine"]
    head = (f"{len(run['results'])} cases, {failures([run])} check failures "
            f"(FMA peak {m['peak_gflops_before']:.0f} before, {m['peak_gflops_after']:.0f} after). Per query-tile size, the "
            f"best time over the key tiles against the shape's best: "
            + ", ".join(f"{bq} rows {span(v)}x" for bq, v in sorted(per_q.items())) + ".")
    return head + "\n\n" + table(["pass", "N", "d", "mask", "best (q x k)", "best ms", "default ms", "default vs best"],
                                 sorted(rows, key=lambda r: (r[0] != "fwd", r[2], r[3] != "none", r[1])))


# ---- the AVX2 code forced on Zen 5 -----------------------------------------------------------------

def peers(rel):
    """The rows of a benchmarks/peers_table.py table, as dicts keyed by its header, and its first line."""
    header, body = md_tables(rel)[0]
    return [dict(zip(header, r)) for r in body], read(rel).splitlines()[0]


def ratio_cells(rows, p, dt, d):
    """'none / causal, none / causal' ratios at N = 1024 then 4096, in the peers table's format."""
    def r(n, mask):
        row = next(x for x in rows if (x["pass"], x["dtype"], x["N"], x["d"], x["mask"]) == (p, dt, n, d, mask))
        v = float(row["torch-flash / cpu"].rstrip("x"))
        return f"{v:.1f}" if v >= 10 else f"{v:.2f}"
    return f"{r('1024', 'none')} / {r('1024', 'causal')}, {r('4096', 'none')} / {r('4096', 'causal')}"


def peers_block(rel):
    """A peers table per pass and dtype: the PyTorch ratios at d = 64 and 128, flashattn's % of the peak."""
    rows, first = peers(rel)
    peak = first.split("fp32 FMA peak ")[1].split(" GFLOP/s")[0]
    body = []
    for p in ("fwd", "bwd"):
        for dt in ("f32", "bf16"):
            sel = [int(x["cpu %pk"]) for x in rows if x["pass"] == p and x["dtype"] == dt]
            body.append([p, dt, ratio_cells(rows, p, dt, "64"), ratio_cells(rows, p, dt, "128"), f"{min(sel)}-{max(sel)} %"])
    head = f"fp32 FMA peak (AVX2, 2 threads) {peak} GFLOP/s."
    return head + "\n\n" + table(["pass", "dtype", "torch-flash / cpu, d = 64: N = 1024 none / causal, N = 4096 none / causal",
                                  "d = 128: the same order", "flashattn % of the AVX2 FMA peak"], body)


@block("cpu-peers-avx2-zen5", AVX2_PEERS)
def cpu_peers_avx2_zen5():
    return peers_block(AVX2_PEERS)


@block("cpu-peers-zen3", ZEN3_PEERS)
def cpu_peers_zen3():
    return peers_block(ZEN3_PEERS)


@block("readme-avx2", ZEN3_PEERS)
def readme_avx2():
    rows, _ = peers(ZEN3_PEERS)

    def pk(p):
        return span([int(x["cpu %pk"]) for x in rows if x["pass"] == p], "{}")

    def ratio(p, dts, fmt="{:.2f}"):
        return span([float(x["torch-flash / cpu"].rstrip("x")) for x in rows if x["pass"] == p and x["dtype"] in dts], fmt)
    return (f"{pk('fwd')} % of the AVX2 FMA peak forward, {pk('bwd')} % backward; against PyTorch's CPU flash kernel "
            f"{ratio('fwd', ('f32', 'bf16'))}x forward, {ratio('bwd', ('f32',))}x f32 backward, "
            f"{ratio('bwd', ('bf16',), '{:.0f}')}x bf16 backward.")


@block("cpu-avx2-blocks", *(f"{AVX2_KERNEL}/{f}-flashattn.json" for _, f in AVX2_BLOCKS), f"{AVX2_KERNEL}/tile-sweep-6x2.json")
def cpu_avx2_blocks():
    runs = [load_json(f"{AVX2_KERNEL}/{f}-flashattn.json") for _, f in AVX2_BLOCKS]
    bests = [fastest([r]) for r in runs]
    peaks = [peak_of([r]) for r in runs]
    rows = []
    for p in ("fwd", "bwd"):
        for d in (64, 128):
            for c in (False, True):
                for n in (1024, 4096):
                    cells = []
                    for best, peak in zip(bests, peaks):
                        r = find(best, "cpu", p, "f32", n, d, c)
                        cells.append(f"{r['ms_min']:.1f} ms ({pct(r, peak):.0f} %)")
                    rows.append([p, n, d, "causal" if c else "none"] + cells)
    sweep = load_json(f"{AVX2_KERNEL}/tile-sweep-6x2.json")
    shapes = tile_sweep(sweep["results"])
    gaps = sorted(((s[(0, 0)] / min(s.values()) - 1, k) for k, s in shapes.items()), reverse=True)

    def name(k):
        return f"{'forward' if k[0] == 'fwd' else 'backward'} N = {k[1]} d = {k[2]}{' causal' if k[3] else ''}"
    lo = min(min(r['machine']['peak_gflops_before'], r['machine']['peak_gflops_after']) for r in runs)
    head = f"AVX2 FMA peak (one core) {lo:.0f}-{max(peaks):.0f} GFLOP/s over the three runs."
    tail = (f"A tile sweep in the same setting with the 6 x 2 kernel (`--tile-sweep --block-q 32,64,128 --block-k "
            f"64,128,256`, 1 thread, f32) put the defaults within {100 * gaps[0][0]:.0f} % of the best tiles in all "
            f"{len(shapes)} cases (largest gaps: {name(gaps[0][1])} {100 * gaps[0][0]:.1f} %, {name(gaps[1][1])} "
            f"{100 * gaps[1][0]:.1f} %; `tile-sweep-6x2.json`).")
    return "\n\n".join([head, table(["pass", "N", "d", "mask"] + [n for n, _ in AVX2_BLOCKS], rows), tail])


# ---- decode against PyTorch's CPU SDPA (benchmarks/decode_peers.sh) -----------------------------------

DECODE = "benchmarks/results/2026-11-27/decode-peers-zen5-bdfe2cb"
DECODE_BEFORE = "benchmarks/results/2026-11-27/decode-peers-zen5-bb73f56"


def decode_rows(rel):
    """The rows of a decode_table.py table as dicts, with flashattn's GB/s and % split out."""
    header, body = md_tables(rel)[0]
    rows = [dict(zip(header, r)) for r in body]
    for r in rows:
        gb, pct = r["flashattn GB/s (% of read BW)"].split(" (")
        r["gbps"], r["pct"] = float(gb), float(pct.rstrip(" %)"))
        r["vs torch"] = float(r["flashattn / torch-flash tokens/s"].rstrip("x"))
    return rows


@block("cpu-decode-zen5", f"{DECODE}/decode.md")
def cpu_decode_zen5():
    return read(f"{DECODE}/decode.md")


@block("cpu-decode-zen5-before", f"{DECODE}/decode.md", f"{DECODE_BEFORE}/decode.md")
def cpu_decode_zen5_before():
    now, before = decode_rows(f"{DECODE}/decode.md"), decode_rows(f"{DECODE_BEFORE}/decode.md")
    parts = []
    for dt in ("f32", "bf16"):
        ratios = [n["gbps"] / b["gbps"] for n in now for b in before
                  if (n["dtype"], n["B"], n["Nk"]) == (b["dtype"], b["B"], b["Nk"]) and n["dtype"] == dt]
        old = [b["gbps"] for b in before if b["dtype"] == dt]
        parts.append(f"{dt} {span(old, '{:.1f}')} GB/s then, {span(ratios)}x that now")
    first = read(f"{DECODE_BEFORE}/decode.md").splitlines()[0]
    bw = first.split("Read bandwidth ")[1].split(" GB/s")[0]
    commit = DECODE_BEFORE.rsplit("-", 1)[1]
    return (f"The same command at {commit}, earlier the same day (read bandwidth {bw} GB/s before its timings): "
            + "; ".join(parts) + ".")


@block("readme-decode", f"{DECODE}/decode.md")
def readme_decode():
    rows = decode_rows(f"{DECODE}/decode.md")

    def of(dt, key, fmt):
        return span([r[key] for r in rows if r["dtype"] == dt], fmt)
    bw = read(f"{DECODE}/decode.md").splitlines()[0].split("Read bandwidth ")[1].split(" GB/s")[0]
    # The host's read bandwidth moves between ~45 and ~90 GB/s: the rates also against the higher
    # value the earlier run measured.
    high = read(f"{DECODE_BEFORE}/decode.md").splitlines()[0].split("Read bandwidth ")[1].split(" GB/s")[0]
    vs_high = span([100 * r["gbps"] / float(high) for r in rows], "{:.0f}")
    return (f"Decode (Nq = 1, Hq = 32, Hk = 8, d = 128, B = 1-8, Nk = 16k-64k, 2 threads) reads K/V at "
            f"{of('f32', 'gbps', '{:.1f}')} GB/s in f32 and {of('bf16', 'gbps', '{:.1f}')} GB/s in bf16, "
            f"{span([r['pct'] for r in rows], '{:.0f}')} % of the {bw} GB/s read bandwidth the run measured "
            f"({vs_high} % of the {high} GB/s this host measured earlier the same day); "
            f"in tokens/s {of('f32', 'vs torch', '{:.1f}')}x (f32) and {of('bf16', 'vs torch', '{:.0f}')}x (bf16) "
            f"PyTorch's CPU SDPA flash kernel on the same shapes.")


# ---- decode over quantized caches on the Zen 3 host (flashattn-bench --decode CSV) ----------------

DECODE_Q_ZEN3 = "benchmarks/results/2026-11-29/decode-quantized-zen3-20852b8"
DECODE_Q_RUNS = {w: [f"{DECODE_Q_ZEN3}/{w}-{i}.csv" for i in (1, 2, 3)] for w in ("before", "after")}


def decode_csv_best(paths):
    """Per (dtype, B, Nk, layout), the row with the smallest min_ms over the decode CSV files."""
    best = {}
    for rel in paths:
        for r in csv.DictReader(io.StringIO(read(rel))):
            k = (r["dtype"], int(r["batch"]), int(r["nk"]), r["layout"])
            if r["status"].startswith("ok") and (k not in best or float(r["min_ms"]) < float(best[k]["min_ms"])):
                best[k] = r
    return best


def decode_read_bws(paths):
    """The read bandwidths (GB/s) the decode CSV files measured before and after their timings."""
    return [float(r[f]) for rel in paths for r in csv.DictReader(io.StringIO(read(rel)))
            for f in ("read_bw_before", "read_bw_after")]


QUANTIZED_DECODE_HEADER = ["K/V dtype", "B", "Nk", "ms", "GB/s (% of read BW)", "tokens/s per sequence",
                           "tokens/s / bf16's", "paged-16 ms"]


def quantized_decode_rows(best, extra=lambda dt, b, nk, ms: []):
    """Per K/V dtype, B and Nk of the quantized decode runs: the cells of QUANTIZED_DECODE_HEADER from
    `best` (decode_csv_best), then extra(dt, b, nk, ms)."""
    rows = []
    for dt in ("f32", "bf16", "i8", "e4m3", "e5m2"):
        for b in (1, 8):
            for nk in (16384, 65536):
                a, pg, bf = best[(dt, b, nk, "contiguous")], best[(dt, b, nk, "paged-16")], best[("bf16", b, nk, "contiguous")]
                ms = float(a["min_ms"])
                rows.append([dt, b, nk, f"{ms:.2f}", f"{float(a['gbps']):.1f} ({float(a['percent_of_read_bw']):.0f} %)",
                             f"{float(a['tokens_per_s_per_seq']):.0f}", f"{float(bf['min_ms']) / ms:.2f}x",
                             f"{float(pg['min_ms']):.2f}"] + extra(dt, b, nk, ms))
    return rows


@block("cpu-decode-quantized-zen3", *DECODE_Q_RUNS["before"], *DECODE_Q_RUNS["after"])
def cpu_decode_quantized_zen3():
    before = decode_csv_best(DECODE_Q_RUNS["before"])

    def was(dt, b, nk, ms):
        w = float(before[(dt, b, nk, "contiguous")]["min_ms"])
        return [f"{w:.2f}", f"{w / ms:.2f}x"]
    rows = quantized_decode_rows(decode_csv_best(DECODE_Q_RUNS["after"]), was)
    commit = DECODE_Q_ZEN3.rsplit("-", 1)[1]
    head = (f"Read bandwidth measured by the three runs of {commit} (before and after each): "
            f"{span(decode_read_bws(DECODE_Q_RUNS['after']), '{:.1f}')} GB/s; "
            "each run's % is against its own value before its timings.")
    return "\n\n".join([head, table(QUANTIZED_DECODE_HEADER + ["e8e8b6e ms", "speed-up"], rows)])


# ---- decode over quantized caches on the Zen 5 host (rows read in place) --------------------------

DECODE_Q_ZEN5 = "benchmarks/results/2026-11-30/decode-quantized-zen5-abac5b3"
DECODE_Q_ZEN5_RUNS = [f"{DECODE_Q_ZEN5}/run-{i}.csv" for i in (1, 2, 3)]


@block("cpu-decode-quantized-zen5", *DECODE_Q_ZEN5_RUNS)
def cpu_decode_quantized_zen5():
    head = (f"Read bandwidth measured by the three runs (before and after each): "
            f"{span(decode_read_bws(DECODE_Q_ZEN5_RUNS), '{:.1f}')} GB/s; "
            "each run's % is against its own value before its timings.")
    return "\n\n".join([head, table(QUANTIZED_DECODE_HEADER, quantized_decode_rows(decode_csv_best(DECODE_Q_ZEN5_RUNS)))])


# ---- the AVX-512 four-key blocks for quantized rows: interleaved A/B (benchmarks/decode_ab.sh) ------

DECODE_AB = "benchmarks/results/2026-11-30/decode-ab-quantized-blocks"


@block("cpu-decode-quantized-blocks", f"{DECODE_AB}/ab.md", f"{DECODE_AB}/command")
def cpu_decode_quantized_blocks():
    first = read(f"{DECODE_AB}/ab.md").splitlines()[0]
    rounds, bw = first.split("over ")[1].split(" interleaved")[0], first.split("rounds ")[1].rstrip(".")
    commits = [line.rsplit(": ", 1)[1] for line in read(f"{DECODE_AB}/command").splitlines()[1:3]]
    (head, body), = md_tables(f"{DECODE_AB}/ab.md")
    col = {h: i for i, h in enumerate(head)}
    cells = {(r[col["dtype"]], r[col["B"]], r[col["Nk"]]): r for r in body}
    shapes = [(b, nk) for b in ("1", "8") for nk in ("16384", "65536")]
    rows = []
    for dt in ("i8", "e4m3", "e5m2", "bf16", "f32"):
        rows.append([dt] + [f"{cells[(dt, b, nk)][col['B / A (median of rounds)']]} "
                            f"({cells[(dt, b, nk)][col['A ms']]} -> {cells[(dt, b, nk)][col['B ms']]} ms)"
                            for b, nk in shapes])
    text = (f"{commits[1]} against {commits[0]}: time ratio, the median over {rounds} interleaved rounds of each "
            f"round's own ratio (fastest call of each build, ms); read bandwidth before the rounds {bw}.")
    b_ms = {k: float(r[col["B ms"]]) for k, r in cells.items()}
    vs_bf16 = "; ".join(f"{dt} {span([b_ms[('bf16', b, nk)] / b_ms[(dt, b, nk)] for b, nk in shapes])}x"
                        for dt in ("i8", "e4m3", "e5m2"))
    tail = f"Tokens/s over bf16's with {commits[1]} (fastest calls, the four shapes): {vs_bf16}."
    return "\n\n".join([text, table(["K/V dtype"] + [f"B = {b}, Nk = {nk}" for b, nk in shapes], rows), tail])


# ---- decode from cache on the Zen 3 host at three commits (flashattn-bench --decode text lines) ---

DECODE_CACHE_ZEN3 = "benchmarks/results/2026-11-29/decode-incache-zen3-f715819"
DECODE_CACHE_COMMITS = ("e8e8b6e", "a7e4dee", "f715819")


@block("cpu-decode-incache-zen3", *[f"{DECODE_CACHE_ZEN3}/{c}.txt" for c in DECODE_CACHE_COMMITS])
def cpu_decode_incache_zen3():
    times = {}  # (commit, dtype) -> the min ms of each round
    for c in DECODE_CACHE_COMMITS:
        for line in read(f"{DECODE_CACHE_ZEN3}/{c}.txt").splitlines():
            f = line.split()
            times.setdefault((c, f[0]), []).append(float(f[f.index("min") + 1]))
    rows = [[dt] + [f"{min(times[(c, dt)]):.2f} ({span(times[(c, dt)], '{:.2f}')})" for c in DECODE_CACHE_COMMITS]
            for dt in ("f32", "bf16", "i8")]
    return table(["dtype"] + [f"{c}: best (range of the {len(times[(c, 'bf16')])} rounds), ms" for c in DECODE_CACHE_COMMITS],
                 rows)
