#!/usr/bin/env bash
# Interleaved A/B of the CPU decode path: two flashattn-bench binaries (two builds of different
# commits) timed on the same shapes in alternating rounds, so both see the same host (bandwidth
# phases, neighbours) and neither gets the warm caches of running second every time.
#
#   benchmarks/decode_ab.sh OUT_DIR BENCH_A BENCH_B [ROUNDS] -- [flashattn-bench --decode options]
#
# Each round runs A then B (odd rounds) or B then A (even rounds) with `--decode --csv` and the given
# options; OUT_DIR gets a.csv / b.csv (all rounds, the round in column `round`), the command, both
# binaries' commits if they were given as build trees of git checkouts, and ab.md: per case the
# fastest call of each binary over the rounds (its min_ms) and their ratio, the median over the
# rounds of each round's B / A ratio (the steadier figure where the host's bandwidth moves between
# rounds: a round's two runs are seconds apart), and the range of the read bandwidth measured
# before the rounds. Default: 4 rounds.
set -euo pipefail
[[ $# -ge 3 ]] || { sed -n '2,13p' "$0" >&2; exit 2; }
out=$1 a=$2 b=$3
shift 3
rounds=4
if [[ $# -gt 0 && $1 != -- ]]; then rounds=$1; shift; fi
[[ $# -gt 0 && $1 == -- ]] && shift
mkdir -p "$out"
echo "$0 $out $a $b $rounds -- $*" > "$out/command"
for bin in "$a" "$b"; do
  # The commit of the source tree a build tree was configured from (CMakeCache's source dir), if any.
  src=$(sed -n 's/^CMAKE_HOME_DIRECTORY:INTERNAL=//p' "$(dirname "$(dirname "$bin")")/CMakeCache.txt" 2>/dev/null || true)
  echo "$bin: $( [[ -n $src ]] && git -C "$src" describe --always --dirty 2>/dev/null || echo unknown)" >> "$out/command"
done
rm -f "$out"/a-*.csv "$out"/b-*.csv
for ((r = 1; r <= rounds; r++)); do
  order=(a b)
  (( r % 2 == 0 )) && order=(b a)
  for which in "${order[@]}"; do
    bin=$a
    [[ $which == b ]] && bin=$b
    "$bin" --decode "$@" --csv "$out/$which-$r.csv" > "$out/$which-$r.log" 2>&1
  done
done
python3 - "$out" "$rounds" <<'EOF'
import csv, statistics, sys
out, rounds = sys.argv[1], int(sys.argv[2])
best, bw, per_round = {}, [], {}
for which in "ab":
    rows = []
    for r in range(1, rounds + 1):
        with open(f"{out}/{which}-{r}.csv", newline="") as f:
            for row in csv.DictReader(f):
                row["round"] = r
                rows.append(row)
    with open(f"{out}/{which}.csv", "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=list(rows[0].keys()))
        w.writeheader()
        w.writerows(rows)
    for row in rows:
        if not row["status"].startswith("ok"):
            sys.exit(f"decode_ab: {which} round {row['round']}: {row['dtype']} B={row['batch']} Nk={row['nk']}: {row['status']}")
        bw.append(float(row["read_bw_before"]))
        key = (row["dtype"], int(row["batch"]), int(row["nk"]), int(row["new_rows"]), row["layout"], row["impl"])
        t = float(row["min_ms"])
        best.setdefault(key, {}).setdefault(which, t)
        best[key][which] = min(best[key][which], t)
        per_round.setdefault(key, {}).setdefault(row["round"], {})[which] = t
lines = [f"Fastest call over {rounds} interleaved rounds; read bandwidth before the rounds {min(bw):.1f}-{max(bw):.1f} GB/s.", "",
         "| dtype | B | Nk | new rows | layout | impl | A ms | B ms | B / A (fastest) | B / A (median of rounds) |",
         "|---|---|---|---|---|---|---|---|---|---|"]
for key in sorted(best):
    t = best[key]
    ratios = [r["b"] / r["a"] for r in per_round[key].values() if "a" in r and "b" in r]
    lines.append("| " + " | ".join(str(k) for k in key) +
                 f" | {t['a']:.3f} | {t['b']:.3f} | {t['b'] / t['a']:.2f} | {statistics.median(ratios):.2f} |")
open(f"{out}/ab.md", "w").write("\n".join(lines) + "\n")
print("\n".join(lines))
EOF
