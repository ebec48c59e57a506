#!/usr/bin/env bash
# roundpipe_generate's sampling and chat options, and the training sample's: a seed repeats a sampled reply; a
# top-p so small that only the most likely token survives gives the greedy continuation; --chat without a chat
# template of the model's, or bad sampling values, are clear errors (exit 2); a run with output.sample_chat
# prints its sample reply; --checkpoint loads a roundpipe checkpoint, and what is not a model is named.
# The greedy chat reply is held to transformers' greedy continuation of the same conversation in ChatML.
# Usage: generate_sampling.sh <bin dir> <fixtures dir> <python with transformers>
set -uo pipefail
bin="$1"
fixtures="$2"
python="$3"
model="$fixtures/models/tinystories-656k"
if [[ ! -d "$model" ]]; then
  echo "SKIP: $model not found (set RP_FIXTURES_DIR)"
  exit 77
fi
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
fail() { echo "FAIL: $*"; exit 1; }
gen() { RP_NUM_THREADS=1 "$bin/roundpipe_generate" --model "$model" --max-new-tokens 12 --prompt "Once upon a time" "$@" 2>"$work/err.txt"; }

greedy=$(gen) || fail "greedy generation failed: $(cat "$work/err.txt")"
[[ "$greedy" == "greedy: Once upon a time"* ]] || fail "unexpected greedy line: $greedy"
narrow=$(gen --temperature 0.9 --top-p 1e-9 --seed 5) || fail "sampling failed: $(cat "$work/err.txt")"
[[ "${narrow#sampled: }" == "${greedy#greedy: }" ]] || fail "top-p 1e-9 is not greedy: '$narrow' vs '$greedy'"
first=$(gen --temperature 1.5 --seed 11) && second=$(gen --temperature 1.5 --seed 11) || fail "sampling failed"
[[ "$first" == "$second" ]] || fail "the same seed sampled '$first' and '$second'"
reply=$(gen --chat --template chatml --temperature 0.8 --top-p 0.9) || fail "--chat failed: $(cat "$work/err.txt")"
[[ "$reply" == "sampled: "* && "$reply" != *"Once upon a time"* ]] || fail "a chat reply repeats the prompt: $reply"
# The user turn in ChatML (its published form) and the assistant's turn opened; greedy to 12 tokens or a special
# token (where roundpipe_generate stops), decoded as transformers decodes.
chat=$(gen --chat --template chatml) || fail "greedy --chat failed: $(cat "$work/err.txt")"
want=$(HF_HUB_OFFLINE=1 TRANSFORMERS_VERBOSITY=error "$python" - "$model" 2>"$work/ref.txt" <<'PY'
import sys, torch
from transformers import AutoModelForCausalLM, AutoTokenizer
tok = AutoTokenizer.from_pretrained(sys.argv[1])
model = AutoModelForCausalLM.from_pretrained(sys.argv[1], torch_dtype=torch.float32).eval()
text = "<|im_start|>user\nOnce upon a time<|im_end|>\n<|im_start|>assistant\n"
ids = tok(text, add_special_tokens=False).input_ids
specials = set(tok.all_special_ids)
reply = []
with torch.no_grad():
    for _ in range(12):
        nxt = int(model(torch.tensor([ids + reply])).logits[0, -1].argmax())
        if nxt in specials:
            break
        reply.append(nxt)
print(tok.decode(reply))
PY
) || fail "the transformers reference failed: $(cat "$work/ref.txt")"
[[ "${chat#greedy: }" == "$want" ]] || fail "the greedy chat reply '${chat#greedy: }' is not transformers' '$want'"

expect2() {  # <stderr pattern> <generate args...>
  local pattern="$1"
  shift
  gen "$@" >/dev/null
  local code=$?
  [[ $code -eq 2 ]] || fail "exit $code (expected 2) for $*: $(cat "$work/err.txt")"
  grep -Eq -- "$pattern" "$work/err.txt" || fail "no '$pattern' for $*: $(cat "$work/err.txt")"
}
expect2 '--template "auto": the model has no chat template of its own' --chat
expect2 'top-p' --top-p 0
expect2 'temperature' --temperature -1

printf 'Once upon a time there was a cat.\n\nThe cat sat on the mat.\n' >"$work/data.txt"
RP_NUM_THREADS=1 "$bin/roundpipe_train" --config /dev/null --set "model.path=$model" --set "data.path=$work/data.txt" \
  --set train.seq_len=16 --set train.global_batch=2 --set train.max_steps=1 --set train.threads=1 \
  --set "output.dir=$work/out" --set 'output.sample_prompt=Hello' --set output.sample_chat=true \
  --set data.template=chatml --set output.sample_temperature=0.7 --set output.sample_tokens=6 >"$work/train.txt" 2>&1 ||
  fail "training with a chat sample failed: $(tail -5 "$work/train.txt")"
grep -q '^sample after: ' "$work/train.txt" || fail "no sample line: $(cat "$work/train.txt")"

# The run's checkpoint: --checkpoint exports it on the fly (into a temporary directory it removes); given as --model
# it is refused naming --checkpoint and roundpipe_export (it said "config.json: cannot open"); so is a PEFT adapter
# directory, and both or neither of --model and --checkpoint.
ckpt="$work/out/checkpoints"
[[ -d "$ckpt" ]] || fail "the run saved no checkpoint in $ckpt"
fromckpt=$(RP_NUM_THREADS=1 "$bin/roundpipe_generate" --checkpoint "$ckpt" --max-new-tokens 5 2>"$work/err.txt") ||
  fail "--checkpoint failed: $(cat "$work/err.txt")"
[[ "$fromckpt" == "greedy: Once upon a time"* ]] || fail "--checkpoint: $fromckpt"
tmp=$(grep -o 'into [^ ]* to load it' "$work/err.txt" | cut -d' ' -f2)
[[ -n "$tmp" && ! -e "$tmp" ]] || fail "the temporary export '$tmp' was left behind: $(cat "$work/err.txt")"
refused() {  # <stderr pattern> <generate args...>
  local pattern="$1"
  shift
  RP_NUM_THREADS=1 "$bin/roundpipe_generate" "$@" >/dev/null 2>"$work/err.txt"
  local code=$?
  [[ $code -eq 2 ]] || fail "exit $code (expected 2) for $*: $(cat "$work/err.txt")"
  grep -Eq -- "$pattern" "$work/err.txt" || fail "no '$pattern' for $*: $(cat "$work/err.txt")"
}
refused "a roundpipe checkpoint, not a Hugging Face model: give it as --checkpoint .*roundpipe_export" --model "$ckpt"
mkdir -p "$work/adapter" && echo '{"peft_type": "LORA"}' >"$work/adapter/adapter_config.json"
refused "a PEFT LoRA adapter \(adapter_config.json\), not a model" --model "$work/adapter"
refused "give one of --model .* and --checkpoint" --prompt hi
refused "not both" --model "$model" --checkpoint "$ckpt"
echo ok
