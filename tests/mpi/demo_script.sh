#!/usr/bin/env bash
# The README's first command, scripts/demo.sh, end to end (shortened to 40 steps): it trains with 2 worker
# processes under mpirun, says which plan and backend it uses, prints a sample before and after, evaluates on
# held-out text at the end, the loss goes down, and it leaves a Hugging Face model directory. Usage: demo_script.sh <source dir> <build dir>
set -uo pipefail
src="$1"; build="$2"
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
fail() { echo "FAIL: $*"; tail -30 "$work/demo.log"; exit 1; }

RP_BUILD_DIR="$build" RP_DEMO_OUT="$work/out" RP_NUM_THREADS=1 timeout 300 "$src/scripts/demo.sh" \
  --set train.max_steps=40 --set output.log_every=10 >"$work/demo.log" 2>&1 || fail "scripts/demo.sh exited $?"
grep -q "pipeline: 1 node(s) x schedule roundpipe, 2 workers" "$work/demo.log" || fail "no pipeline line"
grep -Eq "rank [01]: backend (cpu|cuda)" "$work/demo.log" || fail "no backend line"
grep -q "^sample before: " "$work/demo.log" || fail "no sample before"
grep -q "^sample after: " "$work/demo.log" || fail "no sample after"
grep -Eq "step 40: eval loss [0-9.]+ \(perplexity" "$work/demo.log" || fail "no evaluation at the end"
[[ $(wc -l <"$work/out/metrics.jsonl") -eq 40 ]] || fail "expected 40 metrics records"
python3 - "$work/out/metrics.jsonl" <<'PY' || fail "the loss did not go down"
import json, sys
losses = [json.loads(line)["loss"] for line in open(sys.argv[1])]
first, last = sum(losses[:5]) / 5, sum(losses[-5:]) / 5
print(f"loss {first:.3f} -> {last:.3f}")
assert last < first - 0.5
PY
for f in config.json model.safetensors tokenizer.json; do [[ -s "$work/out/hf/$f" ]] || fail "hf/$f missing"; done
grep -q "demo: the fine-tuned model is in $work/out/hf" "$work/demo.log" || fail "no closing line"
echo "ok: scripts/demo.sh"
