#!/usr/bin/env bash
# roundpipe_sim from the command line: every schedule, JSON and SVG outputs, a run profile and a run trace as input, and a
# bad option value named with exit code 2. Usage: sim_cli.sh <bin dir>
set -uo pipefail
sim="$1/roundpipe_sim"
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
fail() { echo "FAIL: $*"; exit 1; }

"$sim" --workers 4 --layers 8 --microbatches 4 --rounds 2 --hop 0.1 --json "$work/r.json" --svg "$work/g.svg" \
  >"$work/out.txt" || fail "roundpipe_sim failed"
for s in gpipe 1f1b interleaved-1f1b roundpipe; do
  grep -q "^| $s |" "$work/out.txt" || fail "no summary row for $s"
  python3 -c "import json,sys; j=json.load(open(sys.argv[1])); assert 0 <= j['bubble_ratio'] < 1 and j['ops']" \
    "$work/r-$s.json" || fail "bad JSON for $s"
  grep -q "<svg" "$work/g-$s.svg" || fail "no SVG for $s"
done
printf '{"forward_ms": [0.1, 1, 1, 1, 3], "backward_ms": [0, 2, 2, 2, 6]}' >"$work/profile.json"
"$sim" --profile "$work/profile.json" --workers 2 --schedule roundpipe >"$work/p.txt" || fail "--profile failed"
grep -q "^plan: fwd" "$work/p.txt" || fail "no plan printed"
# A run's trace: 2 workers, 2 microbatches; forward 1 ms, fused 1 ms, backward 2 ms (recompute 1 + 1) per
# microbatch: F on w0 [0,2], fused on w1 [1,3], B on w0 [2,6] -> makespan 6.
python3 - "$work/trace.json" <<'PY'
import json, sys
events = []
for step in (3, 4):
    for mb in (0, 1):
        events += [{"name": f"fwd 0-1 mb {mb} (step {step})", "cat": "compute", "ph": "X", "pid": 0, "tid": 0, "ts": 0, "dur": 1000},
                   {"name": f"fused 2-2 mb {mb} (step {step})", "cat": "compute", "ph": "X", "pid": 1, "tid": 0, "ts": 0, "dur": 1000},
                   {"name": f"bwd 0-1 mb {mb} (step {step})", "cat": "compute", "ph": "X", "pid": 0, "tid": 0, "ts": 0, "dur": 2000}]
json.dump({"traceEvents": events}, open(sys.argv[1], "w"))
PY
"$sim" --trace "$work/trace.json" --schedule roundpipe >"$work/t.txt" || fail "--trace failed"
grep -q "plan fwd 0-1 | fused 2-2 | bwd 0-1" "$work/t.txt" || { cat "$work/t.txt"; fail "the trace's plan was not recovered"; }
grep -q "makespan 6.000" "$work/t.txt" || { cat "$work/t.txt"; fail "wrong replay of the trace"; }
"$sim" --schedule zigzag >"$work/bad.txt" 2>&1
code=$?
[[ $code -eq 2 ]] || fail "a bad --schedule exited $code, expected 2"
grep -q 'expected gpipe, 1f1b, interleaved-1f1b or roundpipe' "$work/bad.txt" || fail "unclear error"
echo "ok: roundpipe_sim"
