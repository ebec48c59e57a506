#!/usr/bin/env bash
# The device-direct tensor channel across processes on the GPU: 2 ranks sharing GPU 0 hand stage outputs to
# each other through CUDA IPC memory and events, and still equal the single-process trainer (the MPI tier's
# tinystories_direct case, rerun on the device). Usage: pipeline_direct_gpu.sh <test_pipeline> <goldens> <mpiexec> [flags...]
set -uo pipefail
binary="$1"; export RP_GOLDEN_DIR="${RP_GOLDEN_DIR:-$2}"; mpiexec="$3"; shift 3
if ! command -v nvidia-smi >/dev/null || ! nvidia-smi -L 2>/dev/null | grep -q '^GPU '; then
  echo "SKIP: no usable GPU (nvidia-smi lists none)"; exit 77
fi
export RP_TEST_SETS="pipeline.backend=cuda pipeline.ranks_per_gpu=2"
exec "$(dirname "$0")/run_gtest_gpu.sh" "$mpiexec" -np 2 "$@" "$binary" --gtest_filter='*tinystories_direct*'
