#!/usr/bin/env bash
# Ring attention against the single-process call at equal total work on this machine:
# 2 ranks x 1 thread (the ring) vs 1 rank x 2 threads (the ring with R = 1, and cpu::forward/backward),
# over a small grid. OpenMPI binds a rank to one core by default: the 1-rank run is unbound so that
# its 2 OpenMP threads get both cores. Usage: benchmarks/ring.sh [BUILD_DIR] [OUT_FILE]. Needs flashattn-ring-bench.
set -euo pipefail
build=${1:-build}
out=${2:-/dev/stdout}
bench=$build/benchmarks/flashattn-ring-bench
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_btl_vader_single_copy_mechanism=none
export OMPI_MCA_rmaps_base_oversubscribe=1
{
  echo "# benchmarks/ring.sh at $(git rev-parse --short HEAD 2>/dev/null || echo unknown), $(date -u +%F)"
  for args in "--dtype f32 --causal 1 --sharding zigzag" "--dtype f32 --causal 1 --sharding contiguous" \
              "--dtype f32 --causal 0 --sharding contiguous" "--dtype bf16 --causal 1 --sharding zigzag"; do
    for seq in 2048 8192; do
      OMP_NUM_THREADS=2 mpiexec -n 1 --bind-to none "$bench" --threads 2 --seq "$seq" --heads 8 --dim 64 $args
      OMP_NUM_THREADS=1 mpiexec -n 2 --bind-to core "$bench" --threads 1 --seq "$seq" --heads 8 --dim 64 $args
    done
  done
} > "$out" 2>&1
