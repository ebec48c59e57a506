#!/usr/bin/env bash
# A link cut mid-run (scripts/cluster.sh link h3 down) on a 2 hosts x 2 workers job: every rank ends within
# pipeline.stall_timeout_s (plus the time to notice), non-zero, each naming the operation it waited on and the
# ranks that did not come; on each side some rank names the host it lost — h2's ranks name h3, h3's (which
# nobody can reach to kill) name h2 and exit on their own; collectives included (MPI would otherwise wait for
# TCP to give up, ~15 min). A rank that was waiting for its node-mate when the link went (a node-local
# collective while the mate was in the cross-node one) names that mate: which does depends on timing. The last
# published checkpoint is intact: the run resumes from it on the remaining host and finishes.
# Usage: cut_link.sh <roundpipe_train> <fixtures dir> <scripts/cluster.sh>
set -uo pipefail
train="$1"; fixtures="$2"; cluster="$3"
export RP_CLUSTER_DIR="${TMPDIR:-/tmp}/rp-cluster-cut-link.$$"  # this run's own (setup.sh removes it)
launcher=""
on_exit() { [[ -z $launcher ]] || kill -9 "$launcher" 2>/dev/null; }
source "$(dirname "$0")/setup.sh"

timeout_s=10
args=(--config /dev/null --set "model.path=$model" --set "data.path=$fixtures/text/tinyshakespeare.txt"
  --set train.seq_len=32 --set train.global_batch=12 --set train.microbatches=3 --set train.max_steps=60
  --set optim.mode=sync --set checkpoint.every=2 --set "checkpoint.dir=$work/checkpoints"
  --set "pipeline.stall_timeout_s=$timeout_s" --set pipeline.stall_warn_s=4)
mkdir -p "$work/logs"
# Each rank's log in a file of its own: h3's output cannot reach mpirun once the link is down.
"$cluster" mpirun -np 4 --host h2:2,h3:2 -x RP_NUM_THREADS sh -c \
  'exec "$0" "$@" 2>"'"$work"'/logs/rank-$OMPI_COMM_WORLD_RANK.log"' "$train" "${args[@]}" \
  --set "output.dir=$work/cut" >"$work/mpirun.log" 2>&1 &
launcher=$!
for _ in $(seq 1 600); do
  [[ -d $work/checkpoints/step-00000004 ]] && break
  sleep 0.1
done
[[ -d $work/checkpoints/step-00000004 ]] || fail "no checkpoint of step 4 within 60 s"
expect_pml "$work/logs/rank-0.log"
alive() { pgrep -f "^$train .*output.dir=$work/cut" >/dev/null; }
alive || fail "the ranks ended before the cut"
"$cluster" link h3 down
start=$SECONDS
while alive && ((SECONDS - start < timeout_s + 30)); do sleep 0.2; done
took=$((SECONDS - start))
alive && fail "ranks still running ${took} s after the cut (pipeline.stall_timeout_s = $timeout_s)"
echo "ok: every rank ended ${took} s after the cut (pipeline.stall_timeout_s = $timeout_s)"
((took >= timeout_s - 1)) || fail "the ranks ended after ${took} s: before the stall timeout, so not by it"

# h3's ranks: nobody could kill them, so they ended by the stall inspector, naming the wait and whom it
# waited for (the message's next line, too); some of them names the lost host h2.
for r in 2 3; do
  log="$work/logs/rank-$r.log"
  grep -q "stalled: waited $timeout_s s for " "$log" || fail "rank $r did not end by the stall timeout"
  grep -Eq "rank [0-3] (runs )?on node [01] \(h[23]\)" "$log" || fail "rank $r's log names no rank it waited for"
  grep -q "rank $r failed; ending the job of 4 ranks" "$log" || fail "rank $r did not end with its error"
done
grep -q "on node 0 (h2)" "$work"/logs/rank-[23].log || fail "no rank on h3 names the lost host h2"
# h2's side: some rank names h3 (the others may be ended by mpirun before their own timeout).
grep -q "on node 1 (h3)" "$work"/logs/rank-[01].log || fail "no rank on h2 names the lost host h3"
grep -h "stalled:" "$work"/logs/rank-*.log | cut -c1-240
kill -9 "$launcher" 2>/dev/null  # mpirun may still wait for h3's daemon, as TCP has not given up
wait "$launcher" 2>/dev/null
launcher=""

# The last published checkpoint resumes on the remaining host and the run finishes.
"$cluster" link h3 up
timeout 120 "$cluster" mpirun -np 4 --host h2:4 -x RP_NUM_THREADS "$train" "${args[@]}" \
  --set "output.dir=$work/resumed" --resume latest >"$work/resumed.log" 2>&1 || fail "the resumed run failed"
grep -q "r0 I] resuming from $work/checkpoints/step-" "$work/resumed.log" || fail "the run did not resume"
[[ $(python3 -c "import json,sys; print(max(json.loads(l)['step'] for l in open(sys.argv[1])))" \
  "$work/resumed/metrics.jsonl") == 60 ]] || fail "the resumed run did not reach step 60"
echo "PASS: a cut link ends every rank at the stall timeout, naming the lost host; the checkpoint resumes"
