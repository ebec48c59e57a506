#!/usr/bin/env bash
# The NCCL tensor channel across processes: 2 ranks on 2 GPUs hand stage outputs to each other with NCCL
# send/receive and still equal the single-process trainer (MPI-tier cases rerun on the devices). NCCL takes one
# GPU per rank, so this needs two. Usage: pipeline_nccl_gpu.sh <test_pipeline> <goldens> <mpiexec> [flags...]
set -uo pipefail
binary="$1"; export RP_GOLDEN_DIR="${RP_GOLDEN_DIR:-$2}"; mpiexec="$3"; shift 3
gpus=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU ' || true)
if (( gpus < 2 )); then
  echo "SKIP: the NCCL channel needs 2 GPUs (nvidia-smi lists ${gpus})"; exit 77
fi
export RP_TEST_SETS="pipeline.backend=cuda pipeline.tensor_channel=nccl"
exec "$(dirname "$0")/run_gtest_gpu.sh" "$mpiexec" -np 2 "$@" "$binary" \
  --gtest_filter='*tinystories_many_stages*:*tinystories_1f1b*:*qwen3_layer_recompute*'
