#!/usr/bin/env bash
# roundpipe_sim from the command line: every schedule, JSON and SVG outputs, a run profile and a run trace as input, uneven worker speeds, and a
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
  # The Gantt chart is well-formed SVG with one bar per operation of the JSON result, on its worker's row, from
  # its start to its end on the time axis, titled with its label, and the header gives the makespan.
  python3 - "$work/r-$s.json" "$work/g-$s.svg" <<'PY' || fail "the SVG for $s does not draw the schedule"
import json, sys
import xml.etree.ElementTree as ET
result = json.load(open(sys.argv[1]))
root = ET.parse(sys.argv[2]).getroot()
ns = "{http://www.w3.org/2000/svg}"
bars = root.findall(ns + "rect")
ops = result["ops"]
assert len(bars) == len(ops), (len(bars), len(ops))
left, row, top, scale = 70.0, 28.0, 30.0, (1000.0 - 70.0 - 10.0) / result["makespan"]
for bar, op in zip(bars, ops):
    assert bar.find(ns + "title").text == op["label"], (bar.find(ns + "title").text, op["label"])
    assert abs(float(bar.get("x")) - (left + op["start"] * scale)) < 0.01, (bar.attrib, op)
    assert abs(float(bar.get("width")) - max(0.5, (op["end"] - op["start"]) * scale)) < 0.01, (bar.attrib, op)
    assert abs(float(bar.get("y")) - (top + row * op["worker"])) < 0.01, (bar.attrib, op)
header = root.findall(ns + "text")[0].text
assert f"makespan {result['makespan']:.3f}" in header and f"{result['workers']} workers" in header, header
assert max(op["end"] for op in ops) == result["makespan"], "the last bar does not end at the makespan"
PY
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
# The same run with its backward recompute traced apart (pipeline.recompute_ahead): "recompute 0-1" 1 ms and
# "bwd 0-1" 1 ms add up to the same stage, so the same replay.
sed -e 's/"bwd 0-1 mb \([01]\) (step \([34]\))", "cat": "compute", "ph": "X", "pid": 0, "tid": 0, "ts": 0, "dur": 2000}/"bwd 0-1 mb \1 (step \2)", "cat": "compute", "ph": "X", "pid": 0, "tid": 0, "ts": 0, "dur": 1000}, {"name": "recompute 0-1 mb \1 (step \2)", "cat": "compute", "ph": "X", "pid": 0, "tid": 0, "ts": 0, "dur": 1000}/g' \
  "$work/trace.json" >"$work/trace-ahead.json"
grep -q '"recompute 0-1 mb 1 (step 4)"' "$work/trace-ahead.json" || fail "test setup: no recompute spans"
"$sim" --trace "$work/trace-ahead.json" --schedule roundpipe >"$work/ta.txt" || fail "--trace with recompute spans failed"
grep -q "makespan 6.000" "$work/ta.txt" || { cat "$work/ta.txt"; fail "recompute spans not added back to their stage"; }
# --stages for interleaved-1f1b: workers x chunks counts, honoured (not the balanced split); a wrong count is
# an error naming what it needs.
"$sim" --schedule interleaved-1f1b --workers 2 --virtual 2 --layers 6 --microbatches 2 >"$work/i0.txt" ||
  fail "interleaved-1f1b failed"
"$sim" --schedule interleaved-1f1b --workers 2 --virtual 2 --layers 6 --microbatches 2 --stages 3,1,1,1 \
  >"$work/i1.txt" || fail "interleaved-1f1b with --stages failed"
makespan() { grep -o 'makespan [0-9.]*' "$1" | head -1 | cut -d' ' -f2; }
# 3 of the 6 layers in one chunk: that chunk is the slowest stage, so the pipeline takes longer than balanced.
awk -v a="$(makespan "$work/i1.txt")" -v b="$(makespan "$work/i0.txt")" 'BEGIN { exit !(a > b) }' ||
  fail "--stages 3,1,1,1 ($(makespan "$work/i1.txt")) not slower than the balanced split ($(makespan "$work/i0.txt"))"
"$sim" --schedule interleaved-1f1b --workers 2 --virtual 2 --layers 6 --stages 3,3 >"$work/i2.txt" 2>&1
code=$?
[[ $code -eq 2 ]] || fail "a wrong --stages count exited $code, expected 2"
grep -q 'needs 4 stages (2 workers x 2 chunks), got 2' "$work/i2.txt" || { cat "$work/i2.txt"; fail "unclear error"; }
"$sim" --schedule zigzag >"$work/bad.txt" 2>&1
code=$?
[[ $code -eq 2 ]] || fail "a bad --schedule exited $code, expected 2"
grep -q 'expected gpipe, 1f1b, interleaved-1f1b or roundpipe' "$work/bad.txt" || fail "unclear error"
"$sim" --schedule 1f1b --workers 2 --layers 4 --worker-speeds 1,0.5 >"$work/s1.txt" || fail "--worker-speeds failed"
"$sim" --schedule 1f1b --workers 2 --layers 4 >"$work/s0.txt" || fail "1f1b failed"
# Worker 1 at half speed: slower than two equal workers, and at most twice as slow (every op at most doubles).
awk -v a="$(makespan "$work/s1.txt")" -v b="$(makespan "$work/s0.txt")" 'BEGIN { exit !(a > b && a <= 2 * b) }' ||
  fail "--worker-speeds 1,0.5 gave makespan $(makespan "$work/s1.txt"), expected in ($(makespan "$work/s0.txt"), 2x]"
"$sim" --schedule 1f1b --workers 2 --layers 4 --worker-speeds 1,1,1 >"$work/s2.txt" 2>&1
code=$?
[[ $code -eq 2 ]] || fail "a wrong --worker-speeds count exited $code, expected 2"
grep -q '3 worker speeds (--worker-speeds) for 2 workers' "$work/s2.txt" || { cat "$work/s2.txt"; fail "unclear error"; }
"$sim" --schedule 1f1b --workers 2 --layers 4 --lora >"$work/l.txt" 2>&1
code=$?
[[ $code -eq 2 ]] || fail "--lora without a projection exited $code, expected 2"
grep -q -- '--lora applies to GPU projections' "$work/l.txt" || { cat "$work/l.txt"; fail "unclear error"; }
# Earliest-finish dispatch: named on the plan line, and faster than round-robin with one card at 0.3.
speeds=1,1,1,1,1,1,1,0.3
"$sim" --schedule roundpipe --workers 8 --microbatches 8 --worker-speeds $speeds >"$work/rr.txt" || fail "round_robin failed"
"$sim" --schedule roundpipe --workers 8 --microbatches 8 --worker-speeds $speeds --dispatch earliest_finish \
  >"$work/ef.txt" || fail "--dispatch earliest_finish failed"
grep -q '^plan: .*, dispatch earliest_finish$' "$work/ef.txt" || { cat "$work/ef.txt"; fail "dispatch not named"; }
rr=$(grep -o 'makespan [0-9.]*' "$work/rr.txt" | cut -d' ' -f2)
ef=$(grep -o 'makespan [0-9.]*' "$work/ef.txt" | cut -d' ' -f2)
awk -v a="$ef" -v b="$rr" 'BEGIN { exit !(a < b) }' || fail "earliest_finish ($ef) not faster than round_robin ($rr)"
"$sim" --schedule roundpipe --workers 2 --layers 4 --dispatch fastest >"$work/d2.txt" 2>&1
code=$?
[[ $code -eq 2 ]] || fail "an unknown --dispatch exited $code, expected 2"
grep -q -- '--dispatch = "fastest": expected "round_robin" or "earliest_finish"' "$work/d2.txt" ||
  { cat "$work/d2.txt"; fail "unclear error"; }
echo "ok: roundpipe_sim"
