#!/usr/bin/env bash
# Scaling and tile-size sweeps of flashattn-bench; writes tables, JSON, CSV and plots to OUTDIR.
#
#   benchmarks/sweep.sh [OUTDIR]            full sweeps (long: tens of minutes on 2 cores)
#   QUICK=1 benchmarks/sweep.sh [OUTDIR]    the same commands at small sizes (a smoke test, ~1 min)
#
# 1. scaling: cpu and standard, fwd and bwd, causal and not, d = 64 and 128, seqlen 512 … 16384 checked
#    (the standard baseline checks the cpu backend and vice versa), then 32768 and 65536 unchecked
#    (nothing trusted fits); the standard baseline reports "out of memory" where its N² buffers exceed
#    the memory budget, and "out of time" where one call would take longer than TIME_LIMIT seconds
#    (extrapolated from its previous length). Time should grow as N², flashattn's memory stay flat.
# 2. tiles: the cpu backend over block_q x block_k for each shape, best tiles vs the library default.
#
# Environment: BENCH (flashattn-bench path, default ${BUILD_DIR:-build}/benchmarks/flashattn-bench), BATCH,
# HEADS, DTYPE, HEAD_DIMS, SEQLENS, BIG_SEQLENS, TILE_SEQLENS, BLOCK_Q, BLOCK_K, TIME_LIMIT (seconds per
# call, default 120), EXTRA (more bench options).
set -euo pipefail
cd "$(dirname "$0")/.."
out=${1:-benchmarks/results/$(date -u +%Y%m%d-%H%M)}
bench=${BENCH:-${BUILD_DIR:-build}/benchmarks/flashattn-bench}
if [ "${QUICK:-0}" = 1 ]; then
  : "${HEADS:=2}" "${SEQLENS:=128,256,512}" "${BIG_SEQLENS:=1024}" "${TILE_SEQLENS:=256}"
  : "${BLOCK_Q:=16,64}" "${BLOCK_K:=32,128}" "${EXTRA:=--min-seconds 0 --reps 2 --peak-seconds 0.2}"
fi
batch=${BATCH:-1} heads=${HEADS:-8} dtype=${DTYPE:-f32} dims=${HEAD_DIMS:-64,128}
seqlens=${SEQLENS:-512,1024,2048,4096,8192,16384}
big=${BIG_SEQLENS:-32768,65536}
tile_seqlens=${TILE_SEQLENS:-1024,4096}
read -r -a extra <<<"${EXTRA:---reps 3 --max-seconds 20}"
mkdir -p "$out"
[ -x "$bench" ] || { echo "sweep: $bench not found; build first (scripts/build)" >&2; exit 2; }
checked_max=${seqlens##*,}
status=0

echo "== scaling sweep -> $out/scaling.*"
"$bench" --impl cpu,standard --pass fwd,bwd --causal 0,1 --head-dim "$dims" --dtype "$dtype" --batch "$batch" \
  --heads "$heads" --seqlen "$seqlens,$big" --check-max-seqlen "$checked_max" --time-limit "${TIME_LIMIT:-120}" "${extra[@]}" \
  --json "$out/scaling.json" --csv "$out/scaling.csv" --plot "$out/scaling" | tee "$out/scaling.txt" || status=1

echo "== tile sweep -> $out/tiles.*"
"$bench" --tile-sweep --pass fwd,bwd --causal 0,1 --head-dim "$dims" --dtype "$dtype" --batch "$batch" \
  --heads "$heads" --seqlen "$tile_seqlens" ${BLOCK_Q:+--block-q "$BLOCK_Q"} ${BLOCK_K:+--block-k "$BLOCK_K"} \
  "${extra[@]}" --json "$out/tiles.json" --csv "$out/tiles.csv" | tee "$out/tiles.txt" || status=1

echo "sweep: results in $out (exit $status)"
exit $status
