#!/usr/bin/env bash
# A disk that fills up mid-run (a size-limited tmpfs holding checkpoint.dir): with checkpoint.on_error =
# "stop" the run exits non-zero naming the file and the reason, and the previous checkpoint still resumes;
# with "continue" the run finishes and warns. Needs root to mount (skips otherwise).
# Usage: checkpoint_disk_full.sh <bin dir> <fixtures dir>
set -uo pipefail
source "$(dirname "$0")/../support/tmpfs_disk.sh"
bin="$1"; fixtures="$2"
model="$fixtures/models/tinystories-656k"
if [[ ! -d "$model" ]]; then echo "SKIP: $model not found"; exit 77; fi
# One TinyStories-656K checkpoint (masters + two moments, fp32) is ~8 MB: 12 MB hold one, not two.
tmpfs_disk 12m
fail() { echo "FAIL: $*"; exit 1; }

train() {
  RP_NUM_THREADS=1 timeout 120 "$bin/roundpipe_train" --config /dev/null --set "model.path=$model" \
    --set "data.path=$fixtures/text/tinyshakespeare.txt" --set train.seq_len=32 --set train.global_batch=4 \
    --set train.max_steps=4 --set checkpoint.every=2 --set checkpoint.keep=0 "$@"
}

train --set "output.dir=$work/stop" --set "checkpoint.dir=$disk/stop" >"$work/stop.log" 2>&1
code=$?
[[ $code -ne 0 ]] || { cat "$work/stop.log"; fail "the run ignored a full disk"; }
grep -q "checkpoint of step 4 not saved (the previous one, step-00000002, is intact).*$disk/stop/step-00000004.tmp/shard-00000.h5.*No space left on device" "$work/stop.log" ||
  { tail -5 "$work/stop.log"; fail "the error does not name the file and the reason"; }
[[ -e "$disk/stop/step-00000004.tmp" ]] && fail "the partial save was left on the full disk"
echo "ok: on_error = stop -> exit $code with the file and the reason"
rm -rf "$disk/stop/step-00000004.tmp"
train --set "output.dir=$work/stop" --set "checkpoint.dir=$disk/stop" --set checkpoint.on_error=continue \
  --set train.max_steps=3 --resume latest >"$work/resume.log" 2>&1 || { tail -5 "$work/resume.log"; fail "resuming failed"; }
grep -q "resuming from $disk/stop/step-00000002 (step 2)" "$work/resume.log" || fail "did not resume from step 2"
echo "ok: the previous checkpoint resumes"

# A first checkpoint that does not fit says there is nothing to resume from (it said "the previous one is intact").
rm -rf "$disk"/*
head -c 9M /dev/zero >"$disk/filler"
train --set "output.dir=$work/first" --set "checkpoint.dir=$disk/first" >"$work/first.log" 2>&1 &&
  fail "the run ignored a full disk at its first checkpoint"
grep -q "checkpoint of step 2 not saved (there is no earlier checkpoint to resume from)" "$work/first.log" ||
  { tail -5 "$work/first.log"; fail "the first checkpoint's failure does not say there is none before it"; }
echo "ok: a failed first checkpoint says there is no earlier one"

rm -rf "$disk"/*
train --set "output.dir=$work/cont" --set "checkpoint.dir=$disk/cont" --set checkpoint.on_error=continue \
  >"$work/cont.log" 2>&1 || { tail -5 "$work/cont.log"; fail "on_error = continue: the run stopped"; }
grep -q "checkpoint of step 4 failed, training continues without it" "$work/cont.log" || fail "no warning"
[[ $(wc -l <"$work/cont/metrics.jsonl") -eq 4 ]] || fail "on_error = continue: not every step ran"
echo "ok: on_error = continue -> the run finishes with a warning"
