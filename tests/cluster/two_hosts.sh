#!/usr/bin/env bash
# Two real hosts (scripts/cluster.sh: network namespaces over a bridge, each with its own hostname and eth0)
# against one: mpirun from h1 starts its daemons on h2 and h3 over the emulated Ethernet.
#  1. 2 hosts x 2 workers (data parallel across nodes, found by Open MPI's shared-memory split, not
#     RP_RANKS_PER_NODE) give the per-step losses of 1 host x 4 workers and of the single-process trainer
#     (sync; 1e-6 relative: the node sums before the nodes do, a different float association);
#  2. the 2-host run's step-3 checkpoint resumes on 1 host and the 1-host run's on 2 hosts, and steps 4..6
#     continue each uninterrupted curve (1e-6);
#  3. optim.shard_across_nodes on 2 hosts gives the unsharded losses, and its checkpoint resumes on 1 host.
# Usage: two_hosts.sh <roundpipe_train> <fixtures dir> <scripts/cluster.sh>
set -uo pipefail
train="$1"; fixtures="$2"; cluster="$3"
export RP_CLUSTER_DIR="${TMPDIR:-/tmp}/rp-cluster-two-hosts.$$"  # this run's own (setup.sh removes it)
source "$(dirname "$0")/setup.sh"

# run <dir> <hosts|single> [--set ...]: a 6-step run into <dir>, checkpoints every 3 steps.
run() {
  local dir="$1" where="$2"; shift 2
  local cmd=("$train" --config /dev/null --set "model.path=$model" --set "data.path=$fixtures/text/tinyshakespeare.txt"
    --set train.seq_len=32 --set train.global_batch=12 --set train.microbatches=3 --set train.max_steps=6
    --set optim.mode=sync --set optim.schedule=cosine --set optim.warmup_steps=2 --set optim.lr=3e-3
    --set train.loss_chunk_tokens=4096 --set checkpoint.every=3 --set "output.dir=$dir" "$@")
  if [[ $where == single ]]; then
    timeout 120 "${cmd[@]}" >"$dir.log" 2>&1
  else
    timeout 120 "$cluster" mpirun -np 4 --host "$where" -x RP_NUM_THREADS "${cmd[@]}" >"$dir.log" 2>&1
  fi || fail "the run into $dir ($where) exited $?"
}

# same_losses <a> <b> <first step>: metrics of steps >= first agree within 1e-6 relative.
same_losses() {
  python3 - "$1/metrics.jsonl" "$2/metrics.jsonl" "$3" <<'PY' || fail "losses of $2 differ from $1"
import json, sys
def load(p): return {j["step"]: j["loss"] for j in map(json.loads, open(p))}
a, b, first = load(sys.argv[1]), load(sys.argv[2]), int(sys.argv[3])
steps = [s for s in sorted(a) if s >= first]
assert steps == sorted(b), f"steps {sorted(b)}, expected {steps} (a resumed run starts after its checkpoint)"
for s in steps:
    rel = abs(a[s] - b[s]) / abs(a[s])
    assert rel <= 1e-6, f"step {s}: {a[s]!r} vs {b[s]!r} (rel {rel:.3g})"
print(f"ok: {sys.argv[2]} steps {steps[0]}..{steps[-1]} match {sys.argv[1]}")
PY
}

run "$work/two" h2:2,h3:2
expect_pml "$work/two.log"
grep -q "pipeline: 2 node(s) x schedule roundpipe, 2 workers" "$work/two.log" || { cat "$work/two.log"; fail "the 2-host run is not 2 nodes x 2 workers"; }
run "$work/one" h2:4
grep -q "pipeline: 1 node(s) x schedule roundpipe, 4 workers" "$work/one.log" || { cat "$work/one.log"; fail "the 1-host run is not 1 node x 4 workers"; }
run "$work/single" single
same_losses "$work/one" "$work/two" 1
same_losses "$work/single" "$work/two" 1

# Across the node count: each run's step-3 checkpoint, resumed with the other layout.
run "$work/two-on-one" h2:4 --set "checkpoint.resume=$work/two/checkpoints/step-00000003"
same_losses "$work/two" "$work/two-on-one" 4
run "$work/one-on-two" h2:2,h3:2 --set "checkpoint.resume=$work/one/checkpoints/step-00000003"
same_losses "$work/one" "$work/one-on-two" 4

# The optimizer state sharded across the two hosts (reduce-scatter, update the shard, all-gather the masters):
# the same losses as unsharded; its checkpoint (every rank of both hosts writes its shard) resumes on 1 host.
run "$work/sharded" h2:2,h3:2 --set optim.shard_across_nodes=true
grep -q "optimizer state sharded across 2 nodes" "$work/sharded.log" || { cat "$work/sharded.log"; fail "not sharded"; }
same_losses "$work/two" "$work/sharded" 1
run "$work/sharded-on-one" h2:4 --set "checkpoint.resume=$work/sharded/checkpoints/step-00000003"
same_losses "$work/sharded" "$work/sharded-on-one" 4
echo "PASS: 2 hosts = 1 host = one process, sharded or not; checkpoints move between 1 and 2 hosts"
