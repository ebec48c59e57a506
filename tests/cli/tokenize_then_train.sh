#!/usr/bin/env bash
# End to end through the executables: roundpipe_tokenize writes the pre-tokenized format, roundpipe_train
# trains on it and writes metrics.jsonl; a bad config key exits with code 2 and names the key; without a GPU,
# one process runs the single-process trainer and says so, and pipeline.backend = "cuda" is a clear error.
# Usage: tokenize_then_train.sh <bin dir> <fixtures dir>
set -euo pipefail
bin="$1"
fixtures="$2"
model="$fixtures/models/tinystories-656k"
if [[ ! -d "$model" ]]; then
  echo "SKIP: $model not found (set RP_FIXTURES_DIR)"
  exit 77
fi
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT

"$bin/roundpipe_tokenize" --model "$model" --output "$work/tok" --format text --sample-by paragraph \
  "$fixtures/text/tinystories_sample.txt"
test -s "$work/tok/tokens.bin" && test -s "$work/tok/docs.bin" && test -s "$work/tok/meta.json"

cat >"$work/run.toml" <<TOML
[model]
path = "$model"
[data]
path = "$work/tok"
format = "tokenized"
[train]
seq_len = 32
global_batch = 4
max_steps = 3
threads = 1
[output]
dir = "$work/out"
TOML
"$bin/roundpipe_train" --config "$work/run.toml" 2>&1 | tee "$work/train.txt"
lines=$(wc -l <"$work/out/metrics.jsonl")
[[ "$lines" -eq 3 ]] || { echo "expected 3 metrics records, got $lines"; exit 1; }
# The last step is saved when the run ends, unless checkpoint.at_end = false (benchmarks).
ls -d "$work"/out/checkpoints/step-* >/dev/null 2>&1 || { echo "no checkpoint of the last step"; exit 1; }
"$bin/roundpipe_train" --config "$work/run.toml" --set output.dir="$work/out-no-save" --set checkpoint.at_end=false \
  >/dev/null 2>&1 || { echo "checkpoint.at_end = false: the run failed"; exit 1; }
[[ $(wc -l <"$work/out-no-save/metrics.jsonl") -eq 3 ]] || { echo "checkpoint.at_end = false: not 3 steps"; exit 1; }
if ls -d "$work"/out-no-save/checkpoints/step-* >/dev/null 2>&1; then
  echo "checkpoint.at_end = false saved a checkpoint"; exit 1
fi

set +e
out=$("$bin/roundpipe_train" --config "$work/run.toml" --set train.seqlen=4 2>&1)
code=$?
set -e
[[ $code -eq 2 ]] || { echo "bad key: expected exit code 2, got $code: $out"; exit 1; }
grep -q "unknown key 'train.seqlen' (did you mean 'train.seq_len'?)" <<<"$out" || { echo "message: $out"; exit 1; }

if ! nvidia-smi -L 2>/dev/null | grep -q '^GPU '; then
  grep -q 'backend cpu (pipeline.backend = "auto" and .*): the single-process trainer' "$work/train.txt" \
    || { echo "no line saying one process without a GPU runs the trainer, and why"; exit 1; }
  set +e
  out=$("$bin/roundpipe_train" --config "$work/run.toml" --set pipeline.backend=cuda 2>&1)
  code=$?
  set -e
  [[ $code -eq 2 ]] || { echo "backend cuda without a GPU: expected exit code 2, got $code: $out"; exit 1; }
  grep -q 'pipeline.backend = "cuda" but there is no usable GPU: ' <<<"$out" || { echo "message: $out"; exit 1; }
fi
echo "ok"
