#!/usr/bin/env bash
# flashattn's CPU backend, the standard baseline and PyTorch's CPU SDPA (flash and math backends) on
# the same cases, same machine, same run: one table (peers.md) and one plot (peers.png) in OUTDIR.
#
#   benchmarks/peers.sh [OUTDIR]            B=1, H=16, N = 1024, 4096, d = 64, 128, causal and not,
#                                           f32 and bf16, fwd and bwd, 2 threads (~10 minutes on Zen 4)
#   RUNS=3 benchmarks/peers.sh [OUTDIR]     the pair of runs 3 times; the table keeps each case's fastest
#   QUICK=1 benchmarks/peers.sh [OUTDIR]    tiny sizes (a smoke test of the pipeline, ~1 minute)
#
# PyTorch is not a dependency of flashattn: the first run makes a virtual environment (TORCH_VENV,
# default build/torch-venv, ignored by git) and installs torch from the Python package index into it
# (several GB; later runs reuse it). Not run by ctest.
# Environment: BENCH (flashattn-bench, default ${BUILD_DIR:-build}/benchmarks/flashattn-bench), TORCH_VENV,
# RUNS, THREADS (2), HEADS (16), SEQLENS (1024,4096), HEAD_DIMS (64,128), DTYPES (f32,bf16).
set -euo pipefail
cd "$(dirname "$0")/.."
out=${1:-benchmarks/results/peers-$(date -u +%Y%m%d-%H%M)}
bench=${BENCH:-${BUILD_DIR:-build}/benchmarks/flashattn-bench}
venv=${TORCH_VENV:-${BUILD_DIR:-build}/torch-venv}
if [ "${QUICK:-0}" = 1 ]; then
  : "${HEADS:=2}" "${SEQLENS:=256}" "${HEAD_DIMS:=64}"
fi
threads=${THREADS:-2} heads=${HEADS:-16} seqlens=${SEQLENS:-1024,4096} dims=${HEAD_DIMS:-64,128}
dtypes=${DTYPES:-f32,bf16} runs=${RUNS:-1}
target_args=() torch_env=()
if [ -n "${SIMD_TARGET:-}" ]; then
  target_args=(--simd-target "$SIMD_TARGET")
  case "$SIMD_TARGET" in
    AVX2) target_args+=(--openblas-coretype Haswell)
          torch_env=(ATEN_CPU_CAPABILITY=avx2 ONEDNN_MAX_CPU_ISA=AVX2 MKL_ENABLE_INSTRUCTIONS=AVX2) ;;
    AVX3|AVX3_DL) torch_env=(ATEN_CPU_CAPABILITY=avx512) ;;
    *) echo "peers.sh: SIMD_TARGET=$SIMD_TARGET: PyTorch cannot be capped to it (AVX2, AVX3, AVX3_DL)" >&2; exit 2 ;;
  esac
fi
[ -x "$bench" ] || { echo "peers.sh: $bench not built (scripts/build)" >&2; exit 2; }
if ! "$venv/bin/python" -c 'import torch' 2>/dev/null; then
  echo "peers.sh: installing PyTorch into $venv (once)"
  python3 -m venv "$venv"
  "$venv/bin/pip" install --quiet torch
fi
mkdir -p "$out"
files=() fail=0
for run in $(seq 1 "$runs"); do
  # flashattn-bench first: it measures the fp32 FMA and bf16 dot peaks before and after its timings,
  # and the PyTorch run takes the machine facts and peaks from its JSON.
  "$bench" --impl cpu,standard --pass fwd,bwd --dtype "$dtypes" --batch 1 --heads "$heads" --seqlen "$seqlens" \
    --head-dim "$dims" --causal 0,1 --threads "$threads" --reps 3 --min-seconds 0 --max-seconds 20 --quiet "${target_args[@]}" \
    --json "$out/flashattn-$run.json" | tee "$out/flashattn-$run.txt" || fail=1
  env "${torch_env[@]}" OMP_NUM_THREADS="$threads" "$venv/bin/python" benchmarks/torch_cpu_sdpa.py --pass fwd,bwd --dtype "$dtypes" \
    --batch 1 --heads "$heads" --seqlen "$seqlens" --head-dim "$dims" --causal 0,1 --threads "$threads" --reps 3 \
    --machine-from "$out/flashattn-$run.json" --json "$out/torch-$run.json" | tee "$out/torch-$run.txt" || fail=1
  files+=("$out/flashattn-$run.json" "$out/torch-$run.json")
done
python3 benchmarks/peers_table.py "${files[@]}" --markdown "$out/peers.md" --plot "$out/peers" || fail=1
echo "peers.sh: $out/peers.md, $out/peers.png ($(git rev-parse --short HEAD), $(date -u +%F))"
[ "$fail" = 0 ] || echo "peers.sh: a check failed or a program errored (see above)" >&2
exit "$fail"
