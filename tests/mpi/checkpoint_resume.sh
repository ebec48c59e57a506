#!/usr/bin/env bash
# Pipeline checkpoints end to end with real processes (docs/checkpoint-format.md):
#  1. resharding: a 4-worker run saved at step 3 resumes on 4, 2, 3 workers and on the single-process trainer;
#     losses of steps 4..6 equal the uninterrupted run's (bitwise on 4 workers, 1e-6 relative otherwise), and
#     so does the final state (every dataset's CRC-32 in the step-6 checkpoints) on the same workers;
#  1b. optimizer state sharded across two nodes (RP_RANKS_PER_NODE=2) resumes bitwise, and across 1 <-> 2 nodes;
#  2. async mode resumes bitwise (the saved one-step-stale weights); so do async bfloat16, staleness 3 in
#     bfloat16 (three saved weight versions), float16 with its loss scaler, LoRA and, with $RP_GOLDEN_DIR, the
#     generated Qwen3 (full and LoRA) and Qwen3-MoE (async, with the load-balancing loss);
#  2b. 8-bit AdamW states (bfloat16, split masters beside them) resume bitwise; with RP_CHECKPOINT_LONG=1 they
#     reshard 2 -> 3, and a float32 checkpoint resumes with them (the moments quantized as they load, in a warning);
#  3. kill -9 of a rank at each point of a save: the next start resumes from the previous checkpoint (or the
#     newer complete one), never from a partial one, and removes the partial directory;
#  4. SIGUSR1 to mpirun: the run saves at the next step boundary and exits with code 3;
#  5. roundpipe_export of the newest checkpoint (bf16), and its error for --adapter on a full fine-tune.
# The generated MoE models' resumes (2.), SIGTERM to mpirun (4c., steps of ~2 s), and the second of each pair
# of like cases (resharded resumes across 1 <-> 2 nodes, staleness 3 resumed with 1, float16's loss scaler, Qwen3
# LoRA, kills at the manifest and the rename, the 8-bit reshard and conversion) run only with RP_CHECKPOINT_LONG=1
# (mpi.checkpoint_resume_long, in scripts/test.sh --all): ~1.5 minutes of the default suite, which holds to 25 on a fresh machine.
# Usage: checkpoint_resume.sh <roundpipe_train> <fixtures dir> <mpiexec> [mpiexec flags...]
set -uo pipefail
train="$1"; fixtures="$2"; shift 2
long="${RP_CHECKPOINT_LONG:-0}"
mpi=("$@")
model="$fixtures/models/tinystories-656k"
if [[ ! -d "$model" ]]; then echo "SKIP: $model not found"; exit 77; fi
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
fail() { echo "FAIL: $*"; exit 1; }

# run <dir> <ranks> [--set ...]: one training run into <dir>; returns the exit code.
run() {
  local dir="$1" n="$2"; shift 2
  RP_NUM_THREADS=1 timeout 120 "${mpi[@]}" -n "$n" "$train" --config /dev/null \
    --set "model.path=$model" --set "data.path=$fixtures/text/tinyshakespeare.txt" \
    --set train.seq_len=32 --set train.global_batch=12 --set train.microbatches=3 --set train.max_steps=6 \
    --set optim.schedule=cosine --set optim.warmup_steps=2 --set optim.lr=3e-3 \
    --set checkpoint.every=3 --set "output.dir=$dir" "$@" >"$dir.log" 2>&1
}

# same_losses <a> <b> <first step> <rel tol>: metrics of steps >= first agree.
same_losses() {
  python3 - "$1/metrics.jsonl" "$2/metrics.jsonl" "$3" "$4" <<'PY' || { cat "$2.log" | tail -20; fail "losses of $2 differ from $1"; }
import json, sys
def load(p): return {j["step"]: j["loss"] for j in map(json.loads, open(p))}
a, b, first, tol = load(sys.argv[1]), load(sys.argv[2]), int(sys.argv[3]), float(sys.argv[4])
steps = [s for s in sorted(a) if s >= first]
assert steps and all(s in b for s in steps), (sorted(a), sorted(b))
for s in steps:
    rel = abs(a[s] - b[s]) / abs(a[s])
    assert (a[s] == b[s]) if tol == 0 else rel <= tol, f"step {s}: {a[s]!r} vs {b[s]!r} (rel {rel:.3g})"
print(f"ok: {sys.argv[2]} steps {steps[0]}..{steps[-1]} match (tol {tol})")
PY
}

# same_state <a> <b>: the step-6 checkpoints hold bitwise the same state (every dataset's CRC-32 equal).
same_state() {
  python3 - "$1/checkpoints/step-00000006/manifest.json" "$2/checkpoints/step-00000006/manifest.json" <<'PY' ||
import json, sys
def crcs(p): return {(t["name"], t["kind"], s["offset"]): s["crc32"] for t in json.load(open(p))["tensors"] for s in t["slices"]}
a, b = crcs(sys.argv[1]), crcs(sys.argv[2])
assert a == b, [k for k in a if a[k] != b.get(k)][:5]
print(f"ok: {sys.argv[2]}: {len(a)} datasets bitwise equal")
PY
    fail "the final state of $2 differs from $1"
}

# resumes_bitwise <name> <ranks> <what> [--set ...]: a run into $work/<name> and one resumed from its step-3
# checkpoint on the same ranks give the same losses of steps 4..6 and the same final state, bitwise.
resumes_bitwise() {
  local name="$1" n="$2" what="$3"; shift 3
  run "$work/$name" "$n" "$@" || { tail -20 "$work/$name.log"; fail "the $what run failed"; }
  run "$work/r$name" "$n" "$@" --resume "$work/$name/checkpoints/step-00000003" || fail "$what resume failed"
  same_losses "$work/$name" "$work/r$name" 4 0
  same_state "$work/$name" "$work/r$name"
}

# 1. Resharding (sync).
run "$work/w4" 4 --set optim.mode=sync || { tail -20 "$work/w4.log"; fail "the 4-worker run failed"; }
[[ -f "$work/w4/checkpoints/step-00000003/manifest.json" ]] || fail "no step-3 checkpoint"
for n in 4 2 3 1; do
  run "$work/r$n" "$n" --set optim.mode=sync --resume "$work/w4/checkpoints/step-00000003" ||
    { tail -20 "$work/r$n.log"; fail "resuming on $n worker(s) failed"; }
  grep -q "resuming from .*step-00000003 (step 3)" "$work/r$n.log" || fail "r$n did not say it resumed"
  if [[ $n == 4 ]]; then
    same_losses "$work/w4" "$work/r$n" 4 0
    same_state "$work/w4" "$work/r$n"
  else
    same_losses "$work/w4" "$work/r$n" 4 1e-6
  fi
done

# 1b. Optimizer state sharded across two nodes of two workers (RP_RANKS_PER_NODE=2, optim.shard_across_nodes):
# every rank of both nodes saves its shard; sync and async bfloat16 (the stale weights' shards) resume bitwise;
# the sharded checkpoint resumes on one node of four workers and the one-node checkpoint sharded, within 1e-6.
sharded=(--set optim.shard_across_nodes=true)
RP_RANKS_PER_NODE=2 resumes_bitwise s22 4 "sharded sync" --set optim.mode=sync "${sharded[@]}"
RP_RANKS_PER_NODE=2 resumes_bitwise sa22 4 "sharded async bf16" --set optim.mode=async --set model.dtype=bfloat16 \
  "${sharded[@]}"
grep -q "optimizer state sharded across 2 nodes" "$work/s22.log" || fail "the sharded run did not say so"
if [[ $long == 1 ]]; then
  run "$work/s22to4" 4 --set optim.mode=sync --resume "$work/s22/checkpoints/step-00000003" ||
    { tail -20 "$work/s22to4.log"; fail "resuming the sharded checkpoint on one node failed"; }
  same_losses "$work/s22" "$work/s22to4" 4 1e-6
  RP_RANKS_PER_NODE=2 run "$work/w4to22" 4 --set optim.mode=sync "${sharded[@]}" \
    --resume "$work/w4/checkpoints/step-00000003" || { tail -20 "$work/w4to22.log"; fail "resuming sharded failed"; }
  same_losses "$work/w4" "$work/w4to22" 4 1e-6
fi

# 2. Async mode, same workers: bitwise.
run "$work/a2" 2 --set optim.mode=async || fail "the async run failed"
run "$work/ra2" 2 --set optim.mode=async --resume "$work/a2/checkpoints/step-00000003" || fail "async resume failed"
same_losses "$work/a2" "$work/ra2" 4 0
same_state "$work/a2" "$work/ra2"

# 8-bit states (docs/optimizer.md, "8-bit states"), bfloat16 sync (split masters beside them): bitwise on the
# same workers, their codes and absmax in the shards; (long) resharded 2 -> 3 within 1e-6 (every rank's part whole
# blocks: the tensor's own); and the 4-worker float32 checkpoint resumed with 8-bit states, its moments quantized
# as they load, with a warning (Note [Moments across widths]).
q8=(--set optim.mode=sync --set optim.state_bits=8 --set model.dtype=bfloat16)
resumes_bitwise q8 2 "8-bit states" "${q8[@]}"
python3 - "$work/q8/checkpoints/step-00000003/manifest.json" <<'PY' || fail "the 8-bit checkpoint lacks codes or absmax"
import json, sys
kinds = {t["kind"] for t in json.load(open(sys.argv[1]))["tensors"]}
assert {"exp_avg_q8", "exp_avg_sq_q8", "exp_avg_absmax", "exp_avg_sq_absmax", "exp_avg"} <= kinds, kinds
PY
if [[ $long == 1 ]]; then  # the slices' arithmetic of both is unit.MomentSlices'
  run "$work/q8to3" 3 "${q8[@]}" --resume "$work/q8/checkpoints/step-00000003" ||
    { tail -20 "$work/q8to3.log"; fail "resuming the 8-bit checkpoint on 3 workers failed"; }
  same_losses "$work/q8" "$work/q8to3" 4 1e-6
  run "$work/w4to8" 2 --set optim.mode=sync --set optim.state_bits=8 --resume "$work/w4/checkpoints/step-00000003" ||
    { tail -20 "$work/w4to8.log"; fail "resuming the float32 checkpoint with 8-bit states failed"; }
  grep -q "optim.state_bits was 32 in the checkpoint's run, now 8: the moments are converted" "$work/w4to8.log" ||
    { tail -20 "$work/w4to8.log"; fail "w4to8 did not say its moments are converted"; }
  same_losses "$work/w4" "$work/w4to8" 4 1e-2
fi

# Bounded staleness in bfloat16: optim.staleness = 3 keeps three weight versions; the checkpoint holds the
# weights of the next three iterations (/weights/<name>, <name>@+1, <name>@+2) and resumes bitwise. Resumed
# with another staleness, the run says it starts from the masters.
k3=(--set optim.staleness=3 --set model.dtype=bfloat16)
run "$work/k3" 2 "${k3[@]}" || { tail -20 "$work/k3.log"; fail "the staleness-3 run failed"; }
run "$work/rk3" 2 "${k3[@]}" --resume "$work/k3/checkpoints/step-00000003" || fail "staleness-3 resume failed"
same_losses "$work/k3" "$work/rk3" 4 0
same_state "$work/k3" "$work/rk3"
python3 - "$work/k3/checkpoints/step-00000003/manifest.json" <<'PY' || fail "the staleness-3 checkpoint lacks weight versions"
import json, sys
m = json.load(open(sys.argv[1]))
names = {t["name"] for t in m["tensors"] if t["kind"] == "weights"}
base = {n for n in names if "@+" not in n}
assert base and all(f"{n}@+1" in names and f"{n}@+2" in names and f"{n}@+3" not in names for n in base), sorted(names)[:6]
assert m["training"]["optim_staleness"] == 3, m["training"].get("optim_staleness")
PY
if [[ $long == 1 ]]; then
  run "$work/rk1" 2 --set optim.mode=async --set model.dtype=bfloat16 --resume "$work/k3/checkpoints/step-00000003" ||
    fail "resuming a staleness-3 checkpoint with staleness 1 failed"
  grep -q "saved with optim.staleness = 3, resumed with 1" "$work/rk1.log" || fail "rk1 did not say its weights restart"
fi

# Mixed precision: async bfloat16 (the bf16 one-step-stale weights saved as float32 and restored) and float16
# with its loss scaler (the scale and its good-step count in the manifest): bitwise on the same workers.
for prec in "bf16 --set model.dtype=bfloat16 --set optim.mode=async" \
            "fp16 --set model.dtype=float16 --set optim.mode=sync --set precision.growth_interval=2"; do
  read -r name flags <<<"$prec"
  [[ $name == fp16 && $long != 1 ]] && continue
  # shellcheck disable=SC2086
  resumes_bitwise "$name" 2 "$name" $flags
  python3 - "$work/$name/metrics.jsonl" "$work/r$name/metrics.jsonl" <<'PY' || fail "$name: the loss scales differ"
import json, sys
a, b = ({j["step"]: j.get("loss_scale") for j in map(json.loads, open(p))} for p in sys.argv[1:3])
assert all(a[s] == b[s] for s in (4, 5, 6)), (a, b)
PY
done

# LoRA (adapters only; the base comes from model.path) and the generated Qwen3: bitwise on the same workers.
resumes_bitwise l2 2 LoRA --set optim.mode=sync --set lora.rank=4
if [[ -d "${RP_GOLDEN_DIR:-}/qwen3-tiny" ]]; then
  q=(--set "model.path=$RP_GOLDEN_DIR/qwen3-tiny" --set optim.mode=sync
     --set "model.tokenizer=$(cd "$(dirname "$0")/../../configs/builtin-tiny" && pwd)")
  resumes_bitwise q3 3 Qwen3 "${q[@]}"
  [[ $long == 1 ]] && resumes_bitwise q3l 3 "Qwen3 LoRA" "${q[@]}" --set lora.rank=4
else
  echo "note: RP_GOLDEN_DIR/qwen3-tiny absent, the generated Qwen3 case is not run"
fi
# The generated MoE models with their load-balancing loss, async: stacked expert tensors and the one-step-stale
# weights in the checkpoint, bitwise. GPT-OSS starts from its MXFP4 experts (dequantized at load).
for generated in qwen3-moe-tiny gpt-oss-mxfp4; do
  if [[ $long != 1 ]]; then
    echo "note: the generated $generated case runs with RP_CHECKPOINT_LONG=1 (scripts/test.sh --all)"
  elif [[ -d "${RP_GOLDEN_DIR:-}/$generated" ]]; then
    moe=(--set "model.path=$RP_GOLDEN_DIR/$generated" --set optim.mode=async
         --set "model.tokenizer=$(cd "$(dirname "$0")/../../configs/builtin-tiny" && pwd)")
    resumes_bitwise "$generated" 3 "$generated" "${moe[@]}"
    # LoRA on attention and the experts (PEFT's target_parameters layout) in the checkpoint, bitwise.
    [[ $generated == gpt-oss-mxfp4 ]] && resumes_bitwise "$generated-lora" 3 "$generated LoRA" "${moe[@]}" --set lora.rank=4
  else
    echo "note: RP_GOLDEN_DIR/$generated absent, the generated $generated case is not run"
  fi
done

# 3. kill -9 during a save (every 2 steps; the save of step 4 is hit).
points=(1:4:save-shard)
[[ $long == 1 ]] && points+=(0:4:save-manifest 0:4:save-rename)
for point in "${points[@]}"; do
  dir="$work/k-${point//:/-}"
  RP_FAULT_INJECT="kill:$point" run "$dir" 2 --set optim.mode=sync --set checkpoint.every=2 && fail "$point: the run survived its kill"
  [[ -d "$dir/checkpoints/step-00000002" ]] || fail "$point: the step-2 checkpoint is gone"
  expect=2; [[ $point == *save-rename ]] && expect=4   # renamed, pointer not updated: complete, so it wins
  run "$dir" 2 --set optim.mode=sync --set checkpoint.every=2 --resume latest || { tail -20 "$dir.log"; fail "$point: resume failed"; }
  grep -q "resuming from .*step-0000000$expect (step $expect)" "$dir.log" || { tail -20 "$dir.log"; fail "$point: did not resume from step $expect"; }
  [[ -e "$dir/checkpoints/step-00000004.tmp" ]] && fail "$point: the partial save was left behind"
  same_losses "$work/w4" "$dir" $((expect + 1)) 1e-6
  echo "ok: kill at $point -> resumed from step $expect"
done

# endless <dir> <seq_len> <global_batch> [mpirun flags...]: starts a 2-rank run with no end in the background
# (its pid in $pid) and returns once it has finished a step.
endless() {
  local d="$1" seq="$2" batch="$3"
  shift 3
  RP_NUM_THREADS=1 "${mpi[@]}" "$@" -n 2 "$train" --config /dev/null \
    --set "model.path=$model" --set "data.path=$fixtures/text/tinyshakespeare.txt" \
    --set train.seq_len="$seq" --set train.global_batch="$batch" --set train.microbatches=3 \
    --set train.max_steps=100000 --set "output.dir=$d" >"$d.log" 2>&1 &
  pid=$!
  for _ in $(seq 1 600); do [[ -s "$d/metrics.jsonl" ]] && break; sleep 0.1; done
}

# 4. Preemption: SIGUSR1 to mpirun mid-run.
dir="$work/pre"
endless "$dir" 32 12
kill -USR1 "$pid"
wait "$pid"; code=$?
[[ $code -eq 3 ]] || { tail -20 "$dir.log"; fail "preempted run exited $code, expected 3"; }
latest=$(cat "$dir/checkpoints/latest") || fail "no checkpoint after preemption"
echo "ok: SIGUSR1 -> exit 3 with $latest"

# 4b. SIGTERM to one rank other than 0 (not through mpirun): it tells rank 0, every rank stops at one step.
dir="$work/pre_rank1"
endless "$dir" 32 12
rank1=""
for p in $(pgrep -f "output.dir=$dir"); do
  tr '\0' '\n' <"/proc/$p/environ" 2>/dev/null | grep -qx "OMPI_COMM_WORLD_RANK=1" && rank1=$p
done
[[ -n "$rank1" ]] || fail "cannot find rank 1's process"
kill -TERM "$rank1"
wait "$pid"; code=$?
[[ $code -eq 3 ]] || { tail -20 "$dir.log"; fail "SIGTERM to rank 1: exit $code, expected 3"; }
grep -q "rank 1 received a preemption signal: every rank stops at this step" "$dir.log" || fail "rank 0 did not say why"
grep -q "SIGTERM received by rank 1: saved the checkpoint of step" "$dir.log" || { tail -5 "$dir.log"; fail "rank 0's last line names no signal or rank"; }
latest=$(cat "$dir/checkpoints/latest") || fail "no checkpoint after SIGTERM to rank 1"
echo "ok: SIGTERM to rank 1 -> every rank stops, exit 3 with $latest"

# 4c. SIGTERM to mpirun, steps of ~2 s: with odls_base_sigkill_timeout long enough the ranks save before
# mpirun kills them; mpirun itself exits 1 after a signal of its own (docs/launch.md, "Signals").
if [[ $long == 1 ]]; then
  dir="$work/pre_mpirun"
  endless "$dir" 256 96 --mca odls_base_sigkill_timeout 20
  kill -TERM "$pid"
  wait "$pid"; code=$?
  [[ $code -ne 0 ]] || fail "SIGTERM to mpirun: exit 0"
  grep -Eq "SIGTERM received by rank [01]: saved the checkpoint of step" "$dir.log" || { tail -20 "$dir.log"; fail "SIGTERM to mpirun: no save"; }
  latest=$(cat "$dir/checkpoints/latest") || fail "no checkpoint after SIGTERM to mpirun"
  echo "ok: SIGTERM to mpirun -> the ranks saved $latest (mpirun exit $code)"
else
  echo "note: SIGTERM to mpirun runs with RP_CHECKPOINT_LONG=1 (scripts/test.sh --all)"
fi
dir="$work/pre"  # section 5 exports the SIGUSR1 run's checkpoint

# 5. roundpipe_export takes a checkpoints directory (its newest checkpoint) and writes a HF model directory.
"$(dirname "$train")/roundpipe_export" --checkpoint "$dir/checkpoints" --output "$work/hf" --dtype bfloat16 \
  >"$work/export.log" 2>&1 || { cat "$work/export.log"; fail "roundpipe_export failed"; }
for f in config.json model.safetensors tokenizer.json; do [[ -f "$work/hf/$f" ]] || fail "export: $f missing"; done
grep -q '"torch_dtype": "bfloat16"' "$work/hf/config.json" || fail "export: config.json lacks torch_dtype bfloat16"
"$(dirname "$train")/roundpipe_export" --checkpoint "$dir/checkpoints" --output "$work/peft" --adapter \
  >"$work/export.log" 2>&1 && fail "--adapter of a full fine-tune must fail"
grep -q "needs a LoRA run" "$work/export.log" || { cat "$work/export.log"; fail "export: unclear --adapter error"; }
echo "ok: roundpipe_export"
