#!/usr/bin/env bash
# flashattn's CPU decode and PyTorch's CPU SDPA (flash and math backends, enable_gqa) on the same
# decoding shapes, same machine, same run: one table (decode.md) in OUTDIR, with the read bandwidth
# the run measured, GB/s and tokens/s per sequence (docs/benchmarks.md, "Decode mode").
#
#   benchmarks/decode_peers.sh [OUTDIR]   B = 1, 8; Nk = 16384, 65536; f32, bf16; Hq = 32, Hk = 8,
#                                         d = 128; contiguous and paged (page 16); 2 threads
#   QUICK=1 benchmarks/decode_peers.sh    small sizes (a smoke test of the pipeline)
#
# PyTorch comes from a virtual environment of its own (TORCH_VENV, default build/torch-venv; made and
# filled from the Python package index on the first run). Not run by ctest.
# Environment: BENCH (flashattn-bench, default ${BUILD_DIR:-build}/benchmarks/flashattn-bench), TORCH_VENV,
# THREADS (2), BATCH (1,8), CACHE_LEN (16384,65536), DTYPES (f32,bf16), NEW_ROWS (1), REPS (5).
set -euo pipefail
cd "$(dirname "$0")/.."
out=${1:-benchmarks/results/decode-peers-$(date -u +%Y%m%d-%H%M)}
bench=${BENCH:-${BUILD_DIR:-build}/benchmarks/flashattn-bench}
venv=${TORCH_VENV:-${BUILD_DIR:-build}/torch-venv}
if [ "${QUICK:-0}" = 1 ]; then
  : "${BATCH:=1,2}" "${CACHE_LEN:=1024}" "${REPS:=2}"
fi
threads=${THREADS:-2} batch=${BATCH:-1,8} cache=${CACHE_LEN:-16384,65536} dtypes=${DTYPES:-f32,bf16}
new_rows=${NEW_ROWS:-1} reps=${REPS:-5}
[ -x "$bench" ] || { echo "decode_peers.sh: $bench not built (scripts/build)" >&2; exit 2; }
if ! "$venv/bin/python" -c 'import torch' 2>/dev/null; then
  echo "decode_peers.sh: installing PyTorch into $venv (once)"
  python3 -m venv "$venv"
  "$venv/bin/pip" install --quiet torch
fi
mkdir -p "$out"
fail=0
"$bench" --decode --cache-len "$cache" --batch "$batch" --dtype "$dtypes" --new-rows "$new_rows" --paged --page-size 16 \
  --threads "$threads" --reps "$reps" --csv "$out/flashattn.csv" | tee "$out/flashattn.txt" || fail=1
OMP_NUM_THREADS="$threads" "$venv/bin/python" benchmarks/torch_cpu_decode.py --cache-len "$cache" --batch "$batch" \
  --dtype "$dtypes" --new-rows "$new_rows" --threads "$threads" --reps "$reps" --csv "$out/torch.csv" \
  | tee "$out/torch.txt" || fail=1
python3 benchmarks/decode_table.py "$out/flashattn.csv" "$out/torch.csv" --markdown "$out/decode.md" || fail=1
echo "decode_peers.sh: $out/decode.md ($(git rev-parse --short HEAD), $(date -u +%F), $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2-))"
[ "$fail" = 0 ] || echo "decode_peers.sh: a check failed or a program errored (see above)" >&2
exit "$fail"
