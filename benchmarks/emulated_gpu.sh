#!/usr/bin/env bash
# The host side against the emulated device (docs/emulated.md; docs/benchmarks.md, "The emulated GPU host"):
# a Qwen3-0.6B-shaped model (benchmarks/configs/qwen3-0.6b: its real config, random init, bf16, ~12 GB of host
# state), 8 microbatches of one 4096-token row, W workers on a profile, sync and async. Per run, over the timed
# steps (all but the first two): the step time (median); D, the device's busy time per step, and L, its link's
# (up / down), from metrics.jsonl (the device model's own clock); O, the optimizer's wall time per step on rank 0
# (its trace's optimizer spans); the simulator's makespan for the same plan, profile and shape (roundpipe_sim
# --hardware --model --plan); the node's host peak (the store once, every rank's private peak) in bytes per
# parameter; and the set-up time to the end of the first step (the log's clock).
# Usage: benchmarks/emulated_gpu.sh [workers...]    (default: 1 2; e.g. "1 2 8")
# Environment: RP_EMU_PROFILE (default rtx4090x8), RP_EMU_MODES (default "sync async"), RP_EMU_STEPS (default 8),
# RP_EMU_HOST_TRAFFIC=1 (copies touch the host memory a DMA would), RP_EMU_PLAN (pipeline.plan, default auto:
# the planner's), RP_EMU_KEEP=<dir> (keep the runs' outputs there), RP_BUILD_DIR (default build).
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
build="${RP_BUILD_DIR:-$root/build}"
profile="${RP_EMU_PROFILE:-rtx4090x8}"
read -r -a modes <<<"${RP_EMU_MODES:-sync async}"
steps="${RP_EMU_STEPS:-8}"
traffic="${RP_EMU_HOST_TRAFFIC:-0}"
plan_setting="${RP_EMU_PLAN:-auto}"
workers=("$@")
((${#workers[@]})) || workers=(1 2)
model="$root/benchmarks/configs/qwen3-0.6b"
out="${RP_EMU_KEEP:-$(mktemp -d)}"
[[ -n "${RP_EMU_KEEP:-}" ]] || trap 'rm -rf "$out"' EXIT
mkdir -p "$out"
launch=(mpirun --bind-to none --oversubscribe)
if [[ $(id -u) -eq 0 ]]; then launch+=(--allow-run-as-root); fi
[[ -d /usr/share/games/fortunes ]] || { echo "needs /usr/share/games/fortunes (scripts/bootstrap.sh)"; exit 1; }

echo "Qwen3-0.6B shape, bf16, random init, 8 x 4096 tokens a step, profile $profile, host traffic $traffic;"
echo "medians over steps 3..$steps; D, L from the device model, O from rank 0's optimizer spans"
echo
echo "| W | mode | plan | step ms | D ms | L up/down ms | O ms | T ms | sim ms | step / bound | host peak B/param | set-up s |"
echo "|---:|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|"
for w in "${workers[@]}"; do
  for mode in "${modes[@]}"; do
    dir="$out/w$w-$mode"
    "${launch[@]}" -np "$w" "$build/src/cli/roundpipe_train" --config /dev/null --set "model.path=$model" \
      --set model.init=random --set model.tokenizer=configs/builtin-tiny --set model.dtype=bfloat16 \
      --set data.path=/usr/share/games/fortunes/literature,/usr/share/games/fortunes/wisdom \
      --set data.format=text --set train.seq_len=4096 --set train.global_batch=8 --set train.microbatches=8 \
      --set "train.max_steps=$steps" --set "optim.mode=$mode" --set pipeline.backend=emulated \
      --set "pipeline.plan=$plan_setting" \
      --set "pipeline.emulated_profile=$profile" --set "pipeline.emulated_host_traffic=$([[ $traffic == 1 ]] && echo true || echo false)" \
      --set checkpoint.at_end=false --set output.sample_prompt= --set output.log_every=1 \
      --set "output.dir=$dir" >"$dir.log" 2>&1 || { tail -20 "$dir.log"; exit 1; }
    plan=$(sed -n 's/.*, plan \(.*\) ([0-9]* stages)$/\1/p' "$dir.log" | head -1)
    counts=$(python3 - "$plan" <<'PY'
import sys
def counts(part):
    return ",".join(str(int(b) - int(a) + 1) for a, b in (r.split("-") for r in part.split(",") if r.strip()))
fwd, fused, bwd = (p.strip().split(" ", 1)[1] if " " in p.strip() else "" for p in sys.argv[1].split("|"))
a, b = fused.split("-")
print(f"{counts(fwd)}|{int(b) - int(a)}|{counts(bwd)}")  # the plan's form counts the fused stage without the head
PY
)
    "$build/src/cli/roundpipe_sim" --hardware "$root/cluster-configs/$profile.toml" --model "$model/config.json" \
      --seq 4096 --rows 1 --workers "$w" --microbatches 8 --schedule roundpipe --plan "$counts" \
      --json "$dir-sim.json" >"$dir-sim.txt" 2>&1 || { cat "$dir-sim.txt"; exit 1; }
    python3 - "$dir" "$dir.log" "$dir-sim.json" "$w" "$mode" "$plan" "$model/config.json" <<'PY'
import json, re, statistics, sys
d, log, sim, w, mode, plan, config = sys.argv[1:]
rows = [json.loads(l) for l in open(f"{d}/metrics.jsonl")][2:]
med = lambda xs: statistics.median(xs)
step = med([r["step_time_s"] * 1e3 for r in rows])
D = med([r["device_busy_ms"] for r in rows])
up, down = med([r["link_up_ms"] for r in rows]), med([r["link_down_ms"] for r in rows])
events = json.load(open(f"{d}/trace/rank0.json"))["traceEvents"]
# The optimizer's work, not its waits: each layer's widening, the update and each tensor's copy to the weights,
# as the union of their spans (the update by layer publishes inside the update), per step of the run.
work = sorted((e["ts"], e["ts"] + e["dur"]) for e in events if e.get("ph") == "X" and e.get("cat") == "optimizer"
              and e["name"].split(" ")[0] + " " + e["name"].split(" ")[1] in ("widen layer", "AdamW step", "copy layer"))
busy, end = 0, -1
for a, b in work:
    busy += max(0, b - max(a, end))
    end = max(end, b)
O = busy / 1e3 / int(json.loads(open(f"{d}/metrics.jsonl").readlines()[-1])["step"])
s = json.load(open(sim))
sim_ms = s["makespan"] / s.get("rounds", 1) if "makespan" in s else float("nan")
memory = json.load(open(f"{d}/memory.json"))
node = memory["node_store_mb"] + sum(r["private_peak_mb"] for r in memory["ranks"])
c = json.load(open(config))
h, i, L, V = c["hidden_size"], c["intermediate_size"], c["num_hidden_layers"], c["vocab_size"]
q, kv = c["num_attention_heads"] * c["head_dim"], c["num_key_value_heads"] * c["head_dim"]
params = V * h * (1 if c["tie_word_embeddings"] else 2) + L * (h * q + 2 * h * kv + q * h + 3 * h * i + 2 * h + 2 * c["head_dim"]) + h
setup = float(re.search(r"\[\s*([\d.]+) r0 I\] step 1/", open(log).read()).group(1))
# Sync's tail the schedule cannot hide: every gradient is in the norm, so the update starts after the last
# backward job's gradients — final only with its last microbatch — are widened, and the next iteration's first
# job waits for its layers' update. So T = the widening of the last backward stage's layers + the update's share
# of the first forward stage's parameters (its time x their fraction), per step, from rank 0's trace.
layer_params = [V * h] + [h * q + 2 * h * kv + q * h + 3 * h * i + 2 * h + 2 * c["head_dim"]] * L + [h]
def stages(part):
    return [tuple(map(int, r.split("-"))) for r in part.split(",") if r.strip()]
fwd_part, fused_part, bwd_part = (p.strip().split(" ", 1)[1] if " " in p.strip() else "" for p in plan.split("|"))
first = (stages(fwd_part) or stages(fused_part))[0]
last = (stages(bwd_part) or stages(fused_part))[-1]
timed = {int(r["step"]) for r in rows}
widen = sorted((e["ts"], e["dur"]) for e in events if e.get("ph") == "X" and e["name"].startswith("widen layer")
               and last[0] <= int(e["name"].rsplit(" ", 1)[1]) <= last[1])
updates = [e["dur"] / 1e3 for e in events if e.get("ph") == "X" and e["name"].startswith("AdamW step")
           and int(e["name"].rsplit(" ", 1)[1]) in timed]
widen_ms = sum(d for _, d in widen) / 1e3 / (len(widen) / (last[1] - last[0] + 1) or 1)
share = sum(layer_params[first[0]:first[1] + 1]) / sum(layer_params)
T = widen_ms + (med(updates) if updates else 0) * share
bound = max(D, up, down, O) if mode == "async" else D + T
print(f"| {w} | {mode} | {plan} | {step:.0f} | {D:.0f} | {up:.0f} / {down:.0f} | {O:.0f} | "
      f"{'—' if mode == 'async' else f'{T:.0f}'} | {sim_ms:.0f} | {step / bound:.2f} | {node * 1e6 / params:.1f} | "
      f"{setup:.1f} |")
PY
  done
done
