#!/usr/bin/env bash
# The simulator runs what the runtime runs when the microbatches are not a multiple of the workers (issue 38:
# W = 2, M = 3, the calibration's shape): a real 2-rank run's trace replayed by `roundpipe_sim --trace`
# (its plan, workers and microbatches; two rounds, the dispatch counter continuing) gives every worker the
# same sequence of operations (kind and microbatch, recompute ahead included) as the run's steps 1 and 2 (the
# replay takes its stage times from steps 3 and 4; round-robin dispatch does not depend on them).
# Timing is not compared here (benchmarks/calibrate_sim.sh does, docs/benchmarks.md).
# Usage: sim_remainder.sh <bin dir> <fixtures dir> <mpiexec> [mpiexec flags...]
set -uo pipefail
bin="$1" fixtures="$2"
shift 2
mpi=("$@")
model="$fixtures/models/tinystories-656k"
if [[ ! -d "$model" ]]; then echo "SKIP: $model not found"; exit 77; fi
work="$(mktemp -d)"
trap '[[ -n "${RP_KEEP:-}" ]] || rm -rf "$work"' EXIT
fail() { echo "FAIL: $*"; exit 1; }

RP_NUM_THREADS=1 "${mpi[@]}" -n 2 "$bin/roundpipe_train" --config /dev/null --set "model.path=$model" \
  --set "data.path=$fixtures/text/tinyshakespeare.txt" --set train.seq_len=32 --set train.global_batch=6 \
  --set train.microbatches=3 --set train.max_steps=4 --set pipeline.replan_every=0 --set checkpoint.at_end=false \
  --set "output.dir=$work/out" >"$work/run.log" 2>&1 || { tail -20 "$work/run.log"; fail "the 2-rank run failed"; }
[[ -s "$work/out/trace.json" ]] || fail "the run wrote no trace.json"
"$bin/roundpipe_sim" --trace "$work/out/trace.json" --schedule roundpipe --rounds 2 --json "$work/sim.json" \
  >"$work/sim.txt" || { cat "$work/sim.txt"; fail "roundpipe_sim --trace failed"; }
grep -q "2 workers, 3 microbatches" "$work/sim.txt" || { cat "$work/sim.txt"; fail "the replay is not W=2, M=3"; }
python3 - "$work/out/trace.json" "$work/sim.json" <<'PY' || fail "the simulator's operations differ from the run's"
import json, re, sys
span = re.compile(r"^(fwd|fused|bwd|recompute) (\d+)-(\d+) mb (\d+) \(step (\d+)\)$")
letter = {"fwd": "F", "fused": "T", "bwd": "B", "recompute": "R"}
run = {}
for e in json.load(open(sys.argv[1]))["traceEvents"]:
    m = span.match(e.get("name", ""))
    if e.get("ph") != "X" or not m or int(m.group(5)) > 2:
        continue
    mb = (int(m.group(5)) - 1) * 3 + int(m.group(4))  # the simulator numbers microbatches across rounds
    run.setdefault(e["pid"], []).append((e["ts"], letter[m.group(1)], mb))
sim = {}
for op in json.load(open(sys.argv[2]))["ops"]:
    sim.setdefault(op["worker"], []).append((op["start"], op["label"][0], op["microbatch"]))
assert sorted(run) == sorted(sim) == [0, 1], (sorted(run), sorted(sim))
for w in (0, 1):
    ours = [(k, mb) for _, k, mb in sorted(run[w])]
    theirs = [(k, mb) for _, k, mb in sorted(sim[w], key=lambda o: o[0])]
    assert ours == theirs, f"worker {w}: run {ours}\nsimulated {theirs}"
    print(f"worker {w}: {len(ours)} operations in the same order: {' '.join(k + str(mb) for k, mb in ours)}")
PY
echo "ok: W=2, M=3: the simulator replays the run's operations worker by worker"
