#!/usr/bin/env bash
# launch/slurm/roundpipe.sbatch's own logic, without Slurm: mpiexec stands in for srun and a fake scontrol
# records what it is asked. SIGUSR1 to the script (what Slurm sends before the time limit) must make the ranks
# checkpoint and exit 3 and the script requeue the job; the requeued run must continue from that checkpoint
# (--resume auto) and finish with exit 0. Usage: slurm_requeue.sh <roundpipe_train> <fixtures> <mpiexec> [flags...]
set -uo pipefail
train="$1"; fixtures="$2"; shift 2
model="$fixtures/models/tinystories-656k"
if [[ ! -d "$model" ]]; then echo "SKIP: $model not found"; exit 77; fi
script="$(cd "$(dirname "$0")/../.." && pwd)/launch/slurm/roundpipe.sbatch"
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
fail() { echo "FAIL: $*"; tail -20 "$work/job.log"; exit 1; }
mkdir -p "$work/bin"
printf '#!/bin/sh\necho "$@" >> "%s/scontrol.log"\n' "$work" >"$work/bin/scontrol"
chmod +x "$work/bin/scontrol"
cat >"$work/run.toml" <<TOML
[model]
path = "$model"
[data]
path = "$fixtures/text/tinyshakespeare.txt"
[train]
seq_len = 32
global_batch = 6
microbatches = 3
threads = 1
[output]
dir = "$work/out"
TOML
# The job: the batch script itself (exec, so that signals reach it and not a wrapping subshell).
job() {
  exec env PATH="$work/bin:$PATH" SLURM_JOB_ID=4242 RP_TRAIN="$train" RP_LAUNCHER="$* -n 2" RP_NUM_THREADS=1 \
    "$script" "$work/run.toml" "${extra[@]}" >>"$work/job.log" 2>&1
}

extra=(--set train.max_steps=100000)
(job "$@") &
pid=$!
for _ in $(seq 1 600); do [[ -s "$work/out/metrics.jsonl" ]] && break; sleep 0.1; done
kill -USR1 "$pid"
wait "$pid"; code=$?
[[ $code -eq 3 ]] || fail "the job exited $code after SIGUSR1, expected 3"
grep -q "^requeue 4242$" "$work/scontrol.log" 2>/dev/null || fail "the job was not requeued"
saved=$(sed 's/step-0*//' "$work/out/checkpoints/latest")
echo "ok: SIGUSR1 -> checkpoint of step $saved, exit 3, scontrol requeue 4242"

extra=(--set "train.max_steps=$((saved + 2))")
(job "$@"); code=$?
[[ $code -eq 0 ]] || fail "the requeued job exited $code"
grep -q "resuming from .*step-0*$saved (step $saved)" "$work/job.log" || fail "the requeued job did not resume"
[[ $(grep -c . "$work/scontrol.log") -eq 1 ]] || fail "a finished job must not requeue"
echo "ok: the requeued job resumed at step $saved and finished"
