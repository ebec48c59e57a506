#!/usr/bin/env bash
# QLoRA vs LoRA on the demo's fine-tune (docs/benchmarks.md, "QLoRA vs LoRA"): configs/tiny-finetune.toml
# (TinyStories-656K on tiny-shakespeare) trained with LoRA adapters over the model-dtype base, over an NF4
# base, and over an NF4 base with double-quantised scales (lora.base_dtype, lora.double_quant), on 2 worker
# processes. Prints the training loss every N/5 steps, the mean of the last 5, and the final eval loss (2%
# held-out speeches), side by side.
# Usage: benchmarks/qlora_loss.sh   RP_BENCH_STEPS (default 300), RP_BENCH_RANK (default 8).
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
build="${RP_BUILD_DIR:-$root/build}"
steps="${RP_BENCH_STEPS:-300}"
rank="${RP_BENCH_RANK:-8}"
out="$(mktemp -d)"
trap 'rm -rf "$out"' EXIT
launch=(mpirun --bind-to none)
if [[ $(id -u) -eq 0 ]]; then launch+=(--allow-run-as-root); fi

cd "$root"
for base in model nf4 nf4-double; do
  sets=(--set "lora.rank=$rank" --set lora.alpha=$((2 * rank)) --set "lora.base_dtype=${base%-double}")
  [[ $base == nf4-double ]] && sets+=(--set lora.double_quant=true)
  "${launch[@]}" -np 2 "$build/src/cli/roundpipe_train" --config configs/tiny-finetune.toml "${sets[@]}" \
    --set "train.max_steps=$steps" --set train.threads=1 --set optim.lr=5e-3 --set output.sample_prompt= \
    --set "eval.every=$steps" --set "output.dir=$out/$base" --set output.log_every=1000 >"$out/$base.log" 2>&1
done
python3 - "$out" "$steps" <<'PY'
import json, statistics, sys
out, steps = sys.argv[1], int(sys.argv[2])
bases = ["model", "nf4", "nf4-double"]
rows = {b: [json.loads(l) for l in open(f"{out}/{b}/metrics.jsonl")] for b in bases}
print(f"tiny-finetune on 2 workers, {steps} steps, LoRA rank 8, lr 5e-3; training loss by step")
print()
print("| step | LoRA (fp32 base) | QLoRA (NF4) | QLoRA (NF4, double quant) |")
print("|---:|---:|---:|---:|")
for s in [1] + [steps * k // 5 for k in range(1, 6)]:
    print(f"| {s} | " + " | ".join(f"{rows[b][s - 1]['loss']:.4f}" for b in bases) + " |")
print("| last 5 | " + " | ".join(f"{statistics.mean(r['loss'] for r in rows[b][-5:]):.4f}" for b in bases) + " |")
evals = {b: [r["eval_loss"] for r in rows[b] if r.get("eval_loss") is not None] for b in bases}
print("| eval | " + " | ".join(f"{evals[b][-1]:.4f}" if evals[b] else "-" for b in bases) + " |")
PY
