#!/usr/bin/env bash
# QLoRA's host memory and uploads, measured (docs/benchmarks.md, "QLoRA: host bytes"): LoRA rank 16 over a
# float32 base and over an NF4 base (lora.base_dtype = "nf4", and with lora.double_quant), 1 step on 2 worker
# processes (float32: this CPU's bfloat16 matmuls take minutes a step; a bf16 base is 2 bytes a parameter), of a randomly initialised Qwen3-1.7B (benchmarks/configs/qwen3-1.7b) and a Qwen3-30B-A3B cut to
# RP_BENCH_MOE_LAYERS layers (default 2; every layer sparse, 128 experts). Prints, from each run's memory.json:
# the node store (what the host holds: the frozen base, the adapters' masters and gradient slots), its bytes
# per model parameter (parameters counted from config.json), the weight bytes the workers uploaded per step,
# and the largest rank's resident peak.
# Usage: benchmarks/qlora_memory.sh   RP_BUILD_DIR picks the build.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
bin="${RP_BUILD_DIR:-$root/build}/src/cli/roundpipe_train"
layers="${RP_BENCH_MOE_LAYERS:-2}"
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
mkdir -p "$work/qwen3-1.7b" "$work/qwen3-30b-a3b-$layers"
cp "$root/benchmarks/configs/qwen3-1.7b/config.json" "$work/qwen3-1.7b/"
python3 - "$root/benchmarks/configs/qwen3-30b-a3b/config.json" "$work/qwen3-30b-a3b-$layers/config.json" "$layers" <<'PY'
import json, sys
c = json.load(open(sys.argv[1]))
c["num_hidden_layers"] = int(sys.argv[3])
json.dump(c, open(sys.argv[2], "w"))
PY
printf 'the quick brown fox jumps over the lazy dog\n%.0s' {1..200} >"$work/data.txt"
launch=(mpirun --bind-to none)
if [[ $(id -u) -eq 0 ]]; then launch+=(--allow-run-as-root); fi
steps=1
for model in qwen3-1.7b "qwen3-30b-a3b-$layers"; do
  limit=3  # GB per worker: stages of at most half of it (a MoE layer's float32 experts alone are 2.5 GB)
  [[ $model == qwen3-1.7b ]] || limit=6
  for base in model nf4 nf4-double; do
    sets=(--set lora.rank=16 --set "lora.base_dtype=${base%-double}")
    [[ $base == nf4-double ]] && sets+=(--set lora.double_quant=true)
    RP_NUM_THREADS=1 "${launch[@]}" -np 2 "$bin" --config /dev/null --set "model.path=$work/$model" \
      --set "model.tokenizer=$root/configs/builtin-tiny" --set model.init=random --set model.dtype=float32 \
      --set "data.path=$work/data.txt" --set train.seq_len=16 --set train.global_batch=2 --set train.microbatches=2 \
      --set "train.max_steps=$steps" --set train.threads=1 --set "pipeline.memory_limit_gb=$limit" \
      --set output.sample_prompt= "${sets[@]}" \
      --set "output.dir=$work/out-$model-$base" >"$work/log-$model-$base.txt" 2>&1 ||
      { tail -20 "$work/log-$model-$base.txt"; exit 1; }
  done
done
python3 - "$work" "$steps" "$layers" <<'PY'
import json, sys
work, steps, layers = sys.argv[1], int(sys.argv[2]), sys.argv[3]

def params(c):
    h, v = c["hidden_size"], c["vocab_size"]
    q, kv = c["num_attention_heads"] * c.get("head_dim", h // c["num_attention_heads"]), c["num_key_value_heads"] * c.get("head_dim", h // c["num_attention_heads"])
    attention = 2 * h * q + 2 * h * kv
    if c.get("num_experts"):
        mlp = c["num_experts"] * (3 * h * c["moe_intermediate_size"] + h)
    else:
        mlp = 3 * h * c["intermediate_size"]
    return c["num_hidden_layers"] * (attention + mlp) + v * h * (1 if c.get("tie_word_embeddings") else 2)

print("| model | parameters | base | node store | store bytes / parameter | uploaded per step | largest rank peak |")
print("|---|---:|---|---:|---:|---:|---:|")
for model in ["qwen3-1.7b", f"qwen3-30b-a3b-{layers}"]:
    n = params(json.load(open(f"{work}/{model}/config.json")))
    for base, name in [("model", "float32"), ("nf4", "NF4"), ("nf4-double", "NF4 + double quant")]:
        m = json.load(open(f"{work}/out-{model}-{base}/memory.json"))
        store = m["node_store_mb"] * 1e6
        uploaded = sum(r["uploaded_mb"] for r in m["ranks"]) * 1e6 / steps
        peak = max(r["peak_mb"] for r in m["ranks"])
        print(f"| {model} | {n / 1e9:.2f} B | {name} | {store / 1e9:.2f} GB | {store / n:.3f} | "
              f"{uploaded / 1e9:.2f} GB | {peak / 1e3:.2f} GB |")
PY
