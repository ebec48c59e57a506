#!/usr/bin/env bash
# launch/slurm/roundpipe.sbatch on a real Slurm (scripts/cluster.sh: slurmctld on h1, slurmd on h2 and h3,
# ranks started by srun --mpi=pmix over the emulated Ethernet), 2 nodes x 2 tasks:
#  1. a job runs to completion (sbatch --wait) as 2 nodes x 2 workers;
#  2. the same job signalled as Slurm does before a time limit (scancel --signal=USR1 --batch) checkpoints,
#     exits 3, requeues itself, and the requeued job resumes from that checkpoint and completes: Slurm counts
#     one restart, and the losses of every step equal the uninterrupted job's bitwise.
# Usage: slurm_sbatch.sh <roundpipe_train> <fixtures dir> <scripts/cluster.sh>
set -uo pipefail
train="$1"; fixtures="$2"; cluster="$3"
if ! command -v slurmctld >/dev/null; then echo "SKIP: cluster tier: Slurm is not installed (scripts/bootstrap.sh)"; exit 77; fi
script="$(cd "$(dirname "$0")/../.." && pwd)/launch/slurm/roundpipe.sbatch"
export RP_CLUSTER_DIR="${TMPDIR:-/tmp}/rp-cluster-sbatch.$$"  # this run's own (setup.sh removes it)
source "$(dirname "$0")/setup.sh"
slurm() { "$cluster" on h1 "$@"; }

cat >"$work/run.toml" <<TOML
[model]
path = "$model"
[data]
path = "$fixtures/text/tinyshakespeare.txt"
[train]
seq_len = 32
global_batch = 12
microbatches = 3
max_steps = 30
threads = 1
[optim]
mode = "sync"
[checkpoint]
every = 10
TOML
# submit <name> [sbatch options]: the batch script on 2 nodes x 2 tasks (no GPUs here), output into <name>.
# A 10-minute limit: the script asks for USR1 5 minutes before it (--signal=B:USR1@300), well after the job.
submit() {
  local name="$1"; shift
  slurm env OMPI_MCA_btl_tcp_if_include=eth0 OMPI_MCA_oob_tcp_if_include=eth0 OMPI_MCA_mpi_yield_when_idle=1 \
    RP_TRAIN="$train" \
    sbatch --parsable -N 2 --ntasks-per-node=2 --gpus-per-node=0 --cpus-per-task=1 -t 10 -o "$work/$name.out" "$@" \
    "$script" "$work/run.toml" --set "output.dir=$work/$name"
}

submit whole --wait >/dev/null || fail "the uninterrupted job failed"
expect_pml "$work/whole.out"
grep -q "pipeline: 2 node(s) x schedule roundpipe, 2 workers" "$work/whole.out" || fail "the job is not 2 nodes x 2 workers"

job="$(submit preempted)" || fail "sbatch refused the job"
for _ in $(seq 1 600); do
  [[ -f $work/preempted/metrics.jsonl && $(wc -l <"$work/preempted/metrics.jsonl") -ge 3 ]] && break
  sleep 0.1
done
slurm scancel --signal=USR1 --batch "$job" || fail "scancel --signal=USR1 --batch $job failed"
for _ in $(seq 1 900); do
  [[ -z $(slurm squeue -h -j "$job" -o %T 2>/dev/null) ]] && break
  sleep 0.2
done
state="$(slurm scontrol show job "$job")"
grep -q "JobState=COMPLETED" <<<"$state" || fail "job $job did not complete: $(grep -o 'JobState=[A-Z_]*' <<<"$state")"
grep -q "Restarts=1 " <<<"$state" || fail "job $job was not requeued once: $(grep -o 'Restarts=[0-9]*' <<<"$state")"
grep -q "roundpipe.sbatch: checkpoint saved; requeueing job $job" "$work/preempted.out" || fail "no requeue in the job log"
grep -q "r0 I] resuming from $work/preempted/checkpoints/step-" "$work/preempted.out" || fail "the requeued job did not resume"
python3 - "$work/whole/metrics.jsonl" "$work/preempted/metrics.jsonl" <<'PY' || fail "the loss curve did not continue"
import json, sys
a, b = ({j["step"]: j["loss"] for j in map(json.loads, open(p))} for p in sys.argv[1:3])
assert sorted(a) == sorted(b) == list(range(1, 31)), (sorted(a), sorted(b))
assert all(a[s] == b[s] for s in a), [(s, a[s], b[s]) for s in a if a[s] != b[s]][:3]
print("ok: 30 steps, bitwise the uninterrupted job's losses")
PY
echo "PASS: sbatch on 2 nodes; USR1 -> checkpoint -> requeue -> resume continues the curve"
