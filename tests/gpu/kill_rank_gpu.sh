#!/usr/bin/env bash
# The failure paths of tests/mpi/kill_rank.sh with every rank on the GPU (3 ranks sharing GPU 0): the job
# still ends within 30 s naming the rank, and no process of the job is left holding device memory (or its
# pinned registrations, which go with the process). Usage: kill_rank_gpu.sh <kill_rank.sh> <same arguments>.
set -uo pipefail
script="$1"; shift
if ! command -v nvidia-smi >/dev/null || ! nvidia-smi -L 2>/dev/null | grep -q '^GPU '; then
  echo "SKIP: no usable GPU (nvidia-smi lists none)"; exit 77
fi
RP_REQUIRE_FIXTURES=1 RP_TEST_SETS="pipeline.backend=cuda pipeline.ranks_per_gpu=3" "$script" "$@" || exit 1
sleep 2  # the driver reclaims a dead process's memory asynchronously
left=$(nvidia-smi --query-compute-apps=pid,process_name --format=csv,noheader | grep roundpipe_train || true)
if [[ -n "$left" ]]; then echo "FAIL: processes of the job still hold GPU memory: $left"; exit 1; fi
echo "ok: no process of the job holds GPU memory"
