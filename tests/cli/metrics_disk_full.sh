#!/usr/bin/env bash
# A disk that fills while metrics are written (output.dir on a size-limited tmpfs, nearly full): the run stops at
# the next step boundary with an error naming metrics.jsonl and the reason, every line of metrics.jsonl is whole
# (a write cut short is truncated away), and the checkpoint of the steps done is still saved (checkpoint.dir on
# another disk) and resumes. Needs root to mount (skips otherwise).
# Usage: metrics_disk_full.sh <bin dir> <fixtures dir>
set -uo pipefail
source "$(dirname "$0")/../support/tmpfs_disk.sh"
bin="$1" fixtures="$2"
model="$fixtures/models/tinystories-656k"
if [[ ! -d "$model" ]]; then echo "SKIP: $model not found"; exit 77; fi
tmpfs_disk 1m
fail() { echo "FAIL: $*"; exit 1; }

train() {
  RP_NUM_THREADS=1 timeout 120 "$bin/roundpipe_train" --config /dev/null --set "model.path=$model" \
    --set "data.path=$fixtures/text/tinyshakespeare.txt" --set train.seq_len=32 --set train.global_batch=4 \
    --set train.max_steps=40 --set metrics.tensorboard=false --set output.sample_prompt= \
    --set "output.dir=$disk/run" --set "checkpoint.dir=$work/checkpoints" "$@"
}
# The run's config (a few KB) fits; a few metrics lines (~300 bytes each) more, then the disk is full.
mkdir -p "$disk/run"
python3 - "$disk" <<'PY'
import os, sys
stat = os.statvfs(sys.argv[1])
free = stat.f_bavail * stat.f_frsize
with open(os.path.join(sys.argv[1], "filler"), "wb") as f:
    f.write(b"\0" * (free - 3 * 4096 - 2000))
PY
train >"$work/run.log" 2>&1
code=$?
[[ $code -ne 0 ]] || { tail -5 "$work/run.log"; fail "the run ignored a full disk"; }
grep -q "$disk/run/metrics.jsonl: write failed at step [0-9]*: No space left on device" "$work/run.log" ||
  { tail -10 "$work/run.log"; fail "the error does not name metrics.jsonl and the reason"; }
python3 - "$disk/run/metrics.jsonl" <<'PY' || fail "metrics.jsonl holds a torn line"
import json, sys
text = open(sys.argv[1]).read()
assert text.endswith("\n"), repr(text[-80:])
steps = [json.loads(line)["step"] for line in text.splitlines()]
assert steps == list(range(1, len(steps) + 1)) and steps, steps
print(f"ok: metrics.jsonl holds {len(steps)} whole lines")
PY
latest=$(cat "$work/checkpoints/latest" 2>/dev/null) || { tail -10 "$work/run.log"; fail "no checkpoint was saved"; }
echo "ok: the run stopped (exit $code) naming metrics.jsonl, and saved $latest"
rm -f "$disk/filler"
train --set train.max_steps=$((10#${latest#step-} + 1)) --set "output.dir=$work/resumed" --resume latest \
  >"$work/resume.log" 2>&1 || { tail -10 "$work/resume.log"; fail "resuming from $latest failed"; }
grep -q "resuming from $work/checkpoints/$latest" "$work/resume.log" || { tail -5 "$work/resume.log"; fail "did not resume"; }
echo "ok: the checkpoint resumes"
echo PASS
