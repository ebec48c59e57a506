#!/usr/bin/env bash
# What a user sees when they get something wrong, through the executables: usage errors exit with the
# documented code 2 (not CLI11's own) and --help with 0; option checks speak plainly; a bad value is blamed
# on where it came from (--set or the TOML file); dataset errors name the files and, from roundpipe_tokenize,
# its own flags; roundpipe_export blames --dtype, not the checkpoint.
# Usage: user_errors.sh <bin dir> <fixtures dir>
set -uo pipefail
bin="$1"
fixtures="$2"
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
fail() { echo "FAIL: $*"; exit 1; }
export RP_NUM_THREADS=1

# expect <code> <pattern> <command...>: runs it, checks the exit code and that the output matches.
expect() {
  local want="$1" pattern="$2"
  shift 2
  out=$("$@" 2>&1)
  local code=$?
  [[ $code -eq $want ]] || fail "$*: exit code $code, expected $want: $out"
  grep -qE -- "$pattern" <<<"$out" || fail "$*: output does not match '$pattern': $out"
  local longest
  longest=$(awk '{ if (length($0) > n) n = length($0) } END { print n + 0 }' <<<"$out")
  [[ $longest -lt 400 ]] || fail "$*: a line of $longest characters: $out"
}

for tool in roundpipe_train roundpipe_tokenize roundpipe_export roundpipe_generate roundpipe_sim; do
  expect 2 "no-such-flag|is required|--help" "$bin/$tool" --no-such-flag
  expect 0 "Usage" "$bin/$tool" --help
done
echo "ok: usage errors exit 2, --help exits 0"

expect 2 "max-new-tokens: expected a whole number >= 1, got 0" \
  "$bin/roundpipe_generate" --model "$work/none" --max-new-tokens 0
expect 2 "workers: expected a whole number >= 1, got 0" "$bin/roundpipe_sim" --workers 0
expect 2 "max-shard-gb: expected a number > 0, got -1" \
  "$bin/roundpipe_export" --checkpoint "$work/none" --output "$work/x" --max-shard-gb -1
echo "ok: option checks say what they expect"

# A value is blamed on where it came from.
cat >"$work/run.toml" <<TOML
[model]
path = "$work/none"
[data]
path = "$work/none.txt"
[train]
seq_len = 1
microbatches = 4
TOML
expect 2 "^.*$work/run.toml: train.seq_len = 1: must be >= 2" "$bin/roundpipe_train" --config "$work/run.toml"
expect 2 "--set: train.global_batch = 0: must be >= 1" \
  "$bin/roundpipe_train" --config "$work/run.toml" --set train.seq_len=8 --set train.global_batch=0
expect 2 "$work/run.toml and --set: train.global_batch = 6 is not a multiple of train.microbatches = 4" \
  "$bin/roundpipe_train" --config "$work/run.toml" --set train.seq_len=8 --set train.global_batch=6
# NaN passes every range check: the schema refuses it (and inf) for every float key before anything runs.
expect 2 "--set: key 'optim.lr' = nan: must be a finite number" \
  "$bin/roundpipe_train" --config "$work/run.toml" --set train.seq_len=8 --set optim.lr=nan
expect 2 "--set: key 'lora.alpha' = inf: must be a finite number" \
  "$bin/roundpipe_train" --config "$work/run.toml" --set train.seq_len=8 --set lora.alpha=inf
# An output.dir that cannot be a directory is a usage error naming the key, not a raw filesystem error.
expect 2 "--set: output.dir = \"$work/run.toml/out\": \"$work/run.toml\" is a file, not a directory" \
  "$bin/roundpipe_train" --config "$work/run.toml" --set train.seq_len=8 --set "output.dir=$work/run.toml/out"
echo "ok: config errors name --set or the file"

model="$fixtures/models/tinystories-656k"
if [[ ! -d "$model" ]]; then
  # The config checks above ran and passed: a pass, with what did not run said (a CTest skip would hide them).
  echo "ok, partly: the dataset and export checks did not run ($model not found; set RP_FIXTURES_DIR)"
  exit 0
fi

# A tokenizer with more ids than the model has embedding rows (the NOTICE's 151,643 + 26 added Qwen3 tokens against
# the model's config.json vocab_size) is refused at start, naming both sizes and the key, before any weight loads;
# under mpirun too.
qwen3="$fixtures/tokenizers/qwen3"
if [[ -f "$qwen3/tokenizer.json" ]]; then
  read -r ids rows < <(python3 -c "import json,sys; t=json.load(open(sys.argv[1])); c=json.load(open(sys.argv[2]))
print(max(list(t['model']['vocab'].values())+[a['id'] for a in t['added_tokens']])+1, c['vocab_size'])" \
    "$qwen3/tokenizer.json" "$model/config.json")
  printf 'Once upon a time there was a cat.\n' >"$work/one.txt"
  tok=(--config /dev/null --set "model.path=$model" --set "model.tokenizer=$qwen3" --set "data.path=$work/one.txt"
       --set train.seq_len=16 --set "output.dir=$work/bigtok")
  expect 2 "--set: model.tokenizer = \"$qwen3\" has $ids token ids but the model \($model/config.json\) has vocab_size = $rows" \
    "$bin/roundpipe_train" "${tok[@]}"
  [[ ! -e "$work/bigtok" ]] || fail "the refused run wrote $work/bigtok"
  if command -v mpirun >/dev/null; then
    expect 2 "has $ids token ids but the model .* vocab_size = $rows" \
      mpirun -np 2 --oversubscribe --allow-run-as-root "$bin/roundpipe_train" "${tok[@]}" --set pipeline.backend=cpu
  fi
  echo "ok: a tokenizer larger than the model is refused at start, naming both sizes"
fi
# The model's own tokenizer larger than its config.json's vocab_size (files that do not belong together): named as
# the model's, not blamed on a model.tokenizer nobody set.
mkdir -p "$work/mismatched"
cp "$model/tokenizer.json" "$model/tokenizer_config.json" "$work/mismatched/"
python3 -c "import json,sys; c=json.load(open(sys.argv[1])); c['vocab_size']=1000; json.dump(c, open(sys.argv[2],'w'))" \
  "$model/config.json" "$work/mismatched/config.json"
expect 2 "$work/mismatched/tokenizer.json: the model's own tokenizer has [0-9]+ token ids but its config.json has vocab_size = 1000" \
  "$bin/roundpipe_train" --config /dev/null --set "model.path=$work/mismatched" --set "data.path=$fixtures/text/tinystories_sample.txt" \
  --set train.seq_len=16 --set model.init=random

# Every tool says which roundpipe it is: the version and the commit it was built from, exit 0.
for tool in roundpipe_train roundpipe_sim roundpipe_generate roundpipe_tokenize roundpipe_export; do
  expect 0 '^roundpipe [0-9]+\.[0-9]+\.[0-9]+ \(commit ([0-9a-f]{12}(-dirty)?|unknown)\)$' "$bin/$tool" --version
done

# An empty dataset names its file.
printf '\n\n   \n\n' >"$work/empty.txt"
expect 2 "$work/empty.txt: no samples to train on" "$bin/roundpipe_train" --config /dev/null \
  --set "model.path=$model" --set "data.path=$work/empty.txt" --set train.seq_len=16
expect 2 "$work/empty.txt: no samples to train on" \
  "$bin/roundpipe_tokenize" --model "$model" --output "$work/tok" "$work/empty.txt"
# Messages that sent users the wrong way: a directory as data.path said every record was empty, a missing file did
# not name data.path, a field of the wrong type was "missing", output.sample_chat without a template blamed
# data.template and left files behind, the emulated profiles' directory was listed twice (run from the source
# tree), an inline table as a value was an unknown key.
train=("$bin/roundpipe_train" --config /dev/null --set "model.path=$model" --set train.seq_len=16)
printf 'Once upon a time there was a cat.\n' >"$work/one.txt"
expect 2 "data.path = \"$work\" is a directory: it takes dataset files" "${train[@]}" --set "data.path=$work"
expect 2 "data.path = \"$work/missing.txt\": cannot open the dataset file: No such file or directory" \
  "${train[@]}" --set "data.path=$work/missing.txt"
printf '{"text": 5}\n' >"$work/typed.jsonl"
expect 2 "$work/typed.jsonl:line 1: bad jsonl record: field 'text' is a number, expected a string" \
  "${train[@]}" --set "data.path=$work/typed.jsonl" --set data.format=jsonl
expect 2 "--set: output.sample_chat = true renders output.sample_prompt as a user turn: data.template \"auto\"" \
  "${train[@]}" --set "data.path=$work/one.txt" --set output.sample_prompt=Hi --set output.sample_chat=true \
  --set "output.dir=$work/chat-out"
[[ ! -e "$work/chat-out" ]] || fail "the refused run wrote $work/chat-out"
out=$(cd "$bin/../../.." && "${train[@]}" --set "data.path=$work/one.txt" --set pipeline.backend=emulated \
  --set pipeline.emulated_profile=nope --set "output.dir=$work/emu-out" 2>&1)
listed=$(grep -o 'no nope.toml in [^(]*' <<<"$out" | sed 's/^no nope.toml in //; s/ $//')
[[ -n "$listed" ]] || fail "an unknown emulated profile: $out"
[[ $(tr ',' '\n' <<<"$listed" | sed 's/^ //' | sort | uniq -d | wc -l) -eq 0 ]] ||
  fail "an unknown emulated profile lists a directory twice: $listed"
printf '[train]\nseq_len = {a = 1}\n' >"$work/table.toml"
expect 2 "$work/table.toml: key 'train.seq_len' must be an integer, not a table \(line 2\)" \
  "$bin/roundpipe_train" --config "$work/table.toml" --set "model.path=$model" --set "data.path=$work/one.txt"
echo "ok: dataset, template, profile and table mistakes are named as they are"

# Sizes nobody checked: train.seq_len = 1e9 was OOM-killed after 30 s, 2^63 - 1 an internal error. One microbatch's
# activations are sized before anything is allocated (Note [Sizes before allocating]); refused at once, exit 2, on
# one rank or under mpirun, before the data or the weights load.
for len in 1000000000 9223372036854775807; do
  expect 2 "--set: train.seq_len = $len: a microbatch of 1 row\(s\) of it needs at least [0-9.e+]+ GB of activations" \
    "$bin/roundpipe_train" --config /dev/null --set "model.path=$model" --set "data.path=$work/one.txt" \
    --set train.global_batch=1 --set "train.seq_len=$len"
  grep -q "dataset: \|trainable parameters" <<<"$out" && fail "seq_len $len: refused only after loading: $out"
done
if command -v mpirun >/dev/null; then
  expect 2 "train.seq_len = 1000000000: .* needs at least" mpirun -np 2 --oversubscribe --allow-run-as-root \
    "$bin/roundpipe_train" --config /dev/null --set "model.path=$model" --set "data.path=$work/one.txt" \
    --set train.seq_len=1000000000 --set pipeline.backend=cpu
fi
echo "ok: a sequence length no host holds is refused at once, naming train.seq_len"

# A pre-tokenized corpus whose loss mask leaves no target (docs/training.md, "Steps without targets"): every step
# would train nothing, so the run is refused naming data.path.
python3 - "$work/masked" <<'PY'
import json, os, struct, sys
out, n, length = sys.argv[1], 4, 32
os.makedirs(out)
open(f"{out}/tokens.bin", "wb").write(struct.pack(f"<{n * length}i", *[(5 * i) % 200 + 3 for i in range(n * length)]))
open(f"{out}/docs.bin", "wb").write(struct.pack(f"<{n + 1}Q", *[i * length for i in range(n + 1)]))
open(f"{out}/mask.bin", "wb").write(bytes(n * length))
json.dump({"format": "roundpipe-tokenized", "version": 1, "documents": n, "tokens": n * length, "has_mask": True,
           "tokenizer": "tinystories", "vocab_size": 2048}, open(f"{out}/meta.json", "w"))
PY
expect 2 "--set: data.path = $work/masked \(data.format = \"tokenized\"\): none of its 4 documents has a target token" \
  "$bin/roundpipe_train" --config /dev/null --set "model.path=$model" \
  --set "data.path=$work/masked" --set data.format=tokenized --set train.seq_len=16 --set "output.dir=$work/masked-out"

# roundpipe_tokenize speaks of its own flags.
printf '{"instruction": "Say hi", "output": "hi"}\n{"instruction": 3}\n' >"$work/alpaca.jsonl"
expect 2 '--template "auto": the model has no chat template of its own and the tokenizer has neither .* set --template explicitly' \
  "$bin/roundpipe_tokenize" --model "$model" --output "$work/tok" --format alpaca "$work/alpaca.jsonl"
# --template model reaches the data layer (its help lists it; the option's own check once refused it).
expect 2 '--template "model": no chat template beside .*; set --template to chatml or llama3' \
  "$bin/roundpipe_tokenize" --model "$model" --output "$work/tok" --format alpaca --template model "$work/alpaca.jsonl"
# A built-in template on a tokenizer without its tokens: refused for chat data, naming them (it would train on
# "<|im_start|>" split into plain text).
expect 2 '--template "chatml": the tokenizer .*/tokenizer.json has no special token <\|im_start\|>, <\|im_end\|>: the chat data would be trained on' \
  "$bin/roundpipe_tokenize" --model "$model" --output "$work/tok" --format alpaca --template chatml "$work/alpaca.jsonl"
# On a tokenizer with ChatML's tokens (Qwen3's, beside this model's config) the records are read, the bad one named.
if [[ -f "$fixtures/tokenizers/qwen3/tokenizer.json" ]]; then
  mkdir -p "$work/chatml-model"
  cp "$model/config.json" "$fixtures/tokenizers/qwen3/tokenizer.json" "$work/chatml-model/"
  expect 2 "alpaca.jsonl:line 2: bad alpaca record: .*to skip such records: --skip-bad-records" \
    "$bin/roundpipe_tokenize" --model "$work/chatml-model" --output "$work/tok" --format alpaca --template chatml \
    "$work/alpaca.jsonl"
fi
grep -q "data\." <<<"$out" && fail "roundpipe_tokenize suggests a config key: $out"
expect 2 "sample-by: .*not in" \
  "$bin/roundpipe_tokenize" --model "$model" --output "$work/tok" --sample-by sentence "$work/alpaca.jsonl"
echo "ok: dataset errors name the files and roundpipe_tokenize's flags"

# roundpipe_export blames --dtype for a bad --dtype.
"$bin/roundpipe_train" --config /dev/null --set "model.path=$model" \
  --set "data.path=$fixtures/text/tinyshakespeare.txt" --set train.seq_len=16 --set train.global_batch=2 \
  --set train.max_steps=1 --set "output.dir=$work/out" >"$work/train.log" 2>&1 || { cat "$work/train.log"; fail "training"; }
expect 2 "^.*--dtype 'int8': expected float32, bfloat16 or float16" \
  "$bin/roundpipe_export" --checkpoint "$work/out/checkpoints" --output "$work/hf" --dtype int8
grep -q "manifest.json" <<<"$out" && fail "export blames the manifest for --dtype: $out"
echo "ok: roundpipe_export blames --dtype"

# roundpipe_export never clobbers: a non-empty --output needs --overwrite (which replaces the weight files), and
# the run's own model.path is refused even then (it would destroy the base model).
"$bin/roundpipe_export" --checkpoint "$work/out/checkpoints" --output "$work/hf" >/dev/null 2>&1 || fail "export"
touch "$work/hf/model-00002-of-00002.safetensors"  # a stale shard of an earlier export
expect 2 "--output $work/hf: is not empty \\(config.json, .*pass --overwrite" \
  "$bin/roundpipe_export" --checkpoint "$work/out/checkpoints" --output "$work/hf"
expect 0 "" "$bin/roundpipe_export" --checkpoint "$work/out/checkpoints" --output "$work/hf" --overwrite
[[ -f "$work/hf/model.safetensors" && ! -e "$work/hf/model-00002-of-00002.safetensors" ]] ||
  fail "--overwrite left the stale shard or wrote no model: $(ls "$work/hf")"
cp -r "$model" "$work/base-copy"
"$bin/roundpipe_train" --config /dev/null --set "model.path=$work/base-copy" \
  --set "data.path=$fixtures/text/tinyshakespeare.txt" --set train.seq_len=16 --set train.global_batch=2 \
  --set train.max_steps=1 --set "output.dir=$work/out-copy" >"$work/train.log" 2>&1 || { cat "$work/train.log"; fail "training"; }
before=$(sha256sum "$work/base-copy/model.safetensors")
expect 2 "--output $work/base-copy/: is the directory the checkpoint's run read its model from" \
  "$bin/roundpipe_export" --checkpoint "$work/out-copy/checkpoints" --output "$work/base-copy/" --overwrite
[[ "$(sha256sum "$work/base-copy/model.safetensors")" == "$before" ]] || fail "the base model was modified"
echo "ok: roundpipe_export refuses a non-empty --output without --overwrite, and the run's model.path always"

# A diverged step (fault injection: step 2's loss made NaN) is skipped with a warning naming it; with
# train.max_consecutive_skips = 1 the run stops there, naming the step and the key.
diverge() {
  RP_FAULT_INJECT=nan:0:1:loss "$bin/roundpipe_train" --config /dev/null --set "model.path=$model" \
    --set "data.path=$fixtures/text/tinyshakespeare.txt" --set train.seq_len=16 --set train.global_batch=2 \
    --set train.max_steps=3 "$@"
}
expect 0 "step 2: loss nan, gradient norm nan: not finite, the update is skipped on every rank" \
  diverge --set "output.dir=$work/diverged"
grep -q '"skipped":true' "$work/diverged/metrics.jsonl" || fail "metrics.jsonl does not mark the skipped step"
expect 1 "step 2: skipped 1 step in a row \(non-finite loss or gradients\); stopping \(train.max_consecutive_skips = 1\)" \
  diverge --set "output.dir=$work/stopped" --set train.max_consecutive_skips=1
echo "ok: a diverged step is skipped and named; too many in a row stop the run"
