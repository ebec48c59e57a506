#!/usr/bin/env bash
# TensorBoard event files (docs/metrics.md, "TensorBoard") read back with the tensorboard package's own reader
# (EventAccumulator), against metrics.jsonl: every scalar of every step (float32, as TensorBoard keeps them),
# the evaluation loss at its steps; readable while the run goes on (read once a step is written, the run still
# going); after a resume that redoes steps, TensorBoard's view (the resumed file's SessionLog START drops the
# crashed run's later steps) equals metrics.jsonl's again; two ranks under launch/roundpipe-mpirun add the bubble
# report's ratio at the last step; metrics.tensorboard = false writes none.
# Usage: tensorboard_events.sh <bin dir> <fixtures dir> <python with tensorboard>
set -uo pipefail
bin="$1" fixtures="$2" python="$3"
model="$fixtures/models/tinystories-656k"
if [[ ! -d "$model" ]]; then echo "SKIP: $model not found (set RP_FIXTURES_DIR)"; exit 77; fi
work="$(mktemp -d)"
trap '[[ -n "${RP_KEEP:-}" ]] || rm -rf "$work"' EXIT
fail() { echo "FAIL: $*"; exit 1; }
export RP_NUM_THREADS=1
run=("$bin/roundpipe_train" --config /dev/null --set "model.path=$model"
  --set "data.path=$fixtures/text/tinystories_sample.txt" --set train.seq_len=32 --set train.global_batch=4
  --set data.eval_fraction=0.05 --set eval.every=3 --set checkpoint.every=3 --set checkpoint.async=false)

compare() {  # compare <output dir> [live]: TensorBoard's scalars against metrics.jsonl
  "$python" - "$1" "${2:-}" <<'PY'
import json, math, struct, sys
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
out, live = sys.argv[1], sys.argv[2] == "live"
# The events first: a step's metrics line is written before its event, so while the run goes on every step read
# from the events is already in metrics.jsonl (which may hold a step or two more).
acc = EventAccumulator(f"{out}/tb", size_guidance={"scalars": 0})
acc.Reload()
rows = [json.loads(l) for l in open(f"{out}/metrics.jsonl").read().split("\n")[:-1]]  # whole lines only
tags = set(acc.Tags()["scalars"])
f32 = lambda x: struct.unpack("f", struct.pack("f", x))[0]
checked = 0
for key in ("loss", "lr", "grad_norm", "target_tokens", "tokens_per_s", "step_time_s", "peak_rss_mb", "eval_loss"):
    tag = "eval/loss" if key == "eval_loss" else f"train/{key}"
    want = {r["step"]: r[key] for r in rows if r.get(key) is not None}
    if not want: continue
    assert tag in tags, f"{tag} missing from {sorted(tags)}"
    events = acc.Scalars(tag)
    got = {e.step: e.value for e in events}
    assert len(events) == len(got), (tag, "a step twice", [e.step for e in events])
    if live:  # the steps written so far, none that metrics.jsonl lacks
        assert set(got) <= set(want), (tag, sorted(got), sorted(want))
        want = {s: v for s, v in want.items() if s in got}
    assert set(got) == set(want), (tag, sorted(got), sorted(want))
    for step, value in want.items():
        assert got[step] == f32(value), (tag, step, got[step], value)
    checked += len(want)
steps = sorted(e.step for e in acc.Scalars("train/loss"))
assert steps == list(range(1, len(steps) + 1)) and len(steps) >= (2 if live else len(rows)), (steps, len(rows))
print(f"{len(steps)} steps, {checked} scalars equal metrics.jsonl's ({len(tags)} tags)")
PY
}

# While the run goes on: read as soon as metrics.jsonl has two steps and the run is still running.
"${run[@]}" --set train.max_steps=400 --set "output.dir=$work/live" >"$work/live.log" 2>&1 &
pid=$!
for _ in $(seq 1 600); do
  [[ $(wc -l 2>/dev/null <"$work/live/metrics.jsonl" || echo 0) -ge 2 ]] && break
  kill -0 $pid 2>/dev/null || break
  sleep 0.1
done
kill -0 $pid 2>/dev/null || { cat "$work/live.log"; fail "the run ended before it could be read while going on"; }
live=$(compare "$work/live" live) || { kill $pid; wait $pid; fail "reading the running job's events: $live"; }
kill -TERM $pid; wait $pid
echo "ok: while the run goes on, TensorBoard reads $live"

# A whole run, then a resume from step 3 of a run that had gone to 5 (its steps 4-5 redone).
"${run[@]}" --set train.max_steps=5 --set "output.dir=$work/full" >"$work/full.log" 2>&1 || { cat "$work/full.log"; fail "the run"; }
full=$(compare "$work/full") || fail "the finished run: $full"
echo "ok: a finished run: $full"
rm -rf "$work/full/checkpoints/step-00000005" && echo step-00000003 >"$work/full/checkpoints/latest"
"${run[@]}" --set train.max_steps=6 --set "output.dir=$work/full" --resume latest >"$work/resume.log" 2>&1 ||
  { cat "$work/resume.log"; fail "the resume"; }
[[ $(ls "$work/full/tb" | wc -l) -eq 2 ]] || fail "a resume writes a file of its own: $(ls "$work/full/tb")"
resumed=$(compare "$work/full") || fail "after the resume: $resumed"
echo "ok: after a resume that redid steps 4-5: $resumed"

# Two ranks: the same scalars, and the run's bubble ratio at its last step, as the bubble report prints it.
if command -v mpirun >/dev/null; then
  root=(); [[ $(id -u) -eq 0 ]] && root=(--allow-run-as-root)
  "$(dirname "$0")/../../launch/roundpipe-mpirun" -np 2 --oversubscribe --bind-to none "${root[@]}" "${run[@]}" \
    --set train.max_steps=4 --set "output.dir=$work/two" >"$work/two.log" 2>&1 || { cat "$work/two.log"; fail "two ranks"; }
  two=$(compare "$work/two") || fail "two ranks: $two"
  printed=$(sed -nE 's/.*bubble ratio ([0-9.]+)%.*/\1/p' "$work/two.log")
  [[ -n "$printed" ]] || { cat "$work/two.log"; fail "no bubble report"; }
  "$python" - "$work/two/tb" "$printed" <<'PY' || fail "the bubble ratio"
import sys
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
acc = EventAccumulator(sys.argv[1]); acc.Reload()
events = acc.Scalars("pipeline/bubble_ratio")
assert [e.step for e in events] == [4], events
assert abs(events[0].value * 100 - float(sys.argv[2])) < 0.051, (events[0].value, sys.argv[2])
PY
  echo "ok: two ranks: $two; pipeline/bubble_ratio at the last step = the bubble report's $printed%"
fi

"${run[@]}" --set train.max_steps=1 --set metrics.tensorboard=false --set "output.dir=$work/off" >/dev/null 2>&1 ||
  fail "the run without TensorBoard"
[[ ! -e "$work/off/tb" ]] || fail "metrics.tensorboard = false wrote $work/off/tb"
echo "ok: metrics.tensorboard = false writes no event file"
