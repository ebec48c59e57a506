#!/usr/bin/env bash
# The emulated device end to end (docs/emulated.md): roundpipe_train with pipeline.backend = "emulated" runs the
# whole pipeline — one process, and two ranks under mpirun — against a slow modelled GPU; every metrics row says
# `emulated:<profile>`; the device's busy time per step is the step's model FLOPs (the MFU line's count) at the
# profile's rate; and, read from the trace rather than from wall-clock ratios, async's optimizer spans overlap
# the emulated device's compute spans. Its compute's memory is counted, and runs out as a card's would. A profile
# that does not exist is an error naming the key.
# Usage: emulated_run.sh <bin dir> <source dir> <mpiexec> [mpiexec flags...]
set -euo pipefail
bin="$1" src="$2"
shift 2
mpi=("$@")
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
fail() { echo "FAIL: $*"; exit 1; }
[[ -d /usr/share/games/fortunes ]] || fail "/usr/share/games/fortunes is missing (scripts/bootstrap.sh installs fortunes)"

# The built-in byte-level Llama widened to 6.6M parameters, so that its optimizer step takes tens of
# milliseconds on one thread; 0.25 TFLOP/s makes its ~80 GFLOP steps ~0.3 s on the device, and a fast link
# keeps the uploads out of the way.
mkdir -p "$work/model"
cp "$src/configs/builtin-tiny/tokenizer.json" "$work/model/"
python3 - "$src/configs/builtin-tiny/config.json" "$work/model/config.json" <<'PY'
import json, sys
c = json.load(open(sys.argv[1]))
c.update(hidden_size=384, intermediate_size=1024, num_attention_heads=6, num_key_value_heads=2)
json.dump(c, open(sys.argv[2], "w"))
PY
source "$src/tests/support/slow_gpu.sh"
slow_gpu_profile "$work/slow.toml" 0.25 200.0
run=(--config "$src/configs/builtin-fortunes.toml" --set model.path="$work/model" --set pipeline.backend=emulated
     --set pipeline.emulated_profile="$work/slow.toml" --set train.max_steps=6 --set optim.threads=1
     --set output.sample_prompt= --set checkpoint.at_end=false --set output.log_every=1)
cd "$src"

RP_NUM_THREADS=1 "$bin/roundpipe_train" "${run[@]}" --set optim.mode=async --set output.dir="$work/one" >"$work/one.txt" 2>&1 ||
  { cat "$work/one.txt"; fail "one emulated worker (async) failed"; }
grep -q "backend emulated" "$work/one.txt" || { cat "$work/one.txt"; fail "the log does not say the backend is emulated"; }
python3 - "$work/one" "$work/slow.toml" <<'PY' || fail "the one-worker run's metrics or trace"
import json, math, sys
out = sys.argv[1]
rows = [json.loads(l) for l in open(f"{out}/metrics.jsonl")]
assert len(rows) == 6, len(rows)
rate = 0.25e12  # the profile's tensor_tflops x matmul_efficiency
for r in rows:
    assert r["device"] == "emulated:slow", r
    # Synthetic losses: a uniform guess over the 259-token vocabulary; the device field says so.
    assert abs(r["loss"] - math.log(259)) < 1e-9, r["loss"]
    # Its rates are a model's, and their keys say so.
    assert "model_tflops" not in r and "mfu" not in r and r["modelled_mfu"] > 0, r
    # One worker runs one fused stage (no recompute): its device computes the model FLOPs of the step.
    model_flops = r["modelled_tflops"] * 1e12 * r["step_time_s"]
    expected_ms = model_flops / rate * 1e3
    assert abs(r["device_busy_ms"] - expected_ms) < 0.01 * expected_ms, (r["device_busy_ms"], expected_ms)
    # Every step downloads its gradients; its weights may have gone up during the step before (Note [Prefetch
    # across iterations]: where the previous step left time, the last step uploads nothing of its own).
    assert r["link_down_ms"] > 0 and r["link_up_ms"] >= 0, r
assert sum(r["link_up_ms"] for r in rows) > 0, [r["link_up_ms"] for r in rows]
# Its meta tensors are counted as the card would hold them: the memory report's job peak is the compute's, and
# the report says whose.
memory = json.load(open(f"{out}/memory.json"))
assert memory["device"] == "emulated:slow" and "emulated" in memory["modelled"], memory
ranks = memory["ranks"]
assert ranks[0]["gpu_job_peak_mb"] > 1, ranks
# The layer profile's times are the model's: it says so, and a real device's run or the simulator refuses them
# unless told (below).
profile = json.load(open(f"{out}/profile.json"))
assert profile["device"] == "emulated:slow" and profile["times"] == "modelled", profile
# Every TensorBoard scalar is under the device's name, the rates as modelled ones.
import glob, re
events = b"".join(open(f, "rb").read() for f in glob.glob(f"{out}/tb/events.out.tfevents.*"))
tags = set(re.findall(rb"[\w:./]*train/[a-z_]+", events))
assert b"emulated:slow/train/loss" in tags and b"emulated:slow/train/modelled_mfu" in tags, tags
assert all(t.startswith(b"emulated:slow/") for t in tags) and b"emulated:slow/train/mfu" not in tags, tags
trace = json.load(open(f"{out}/trace/rank0.json"))["traceEvents"]
names = [e for e in trace if e.get("ph") == "M" and e.get("name") == "process_name"]
assert "emulated:slow" in names[0]["args"]["name"], names
device = [(e["ts"], e["ts"] + e["dur"]) for e in trace if e.get("tid") == 3 and e["name"] == "emulated compute"]
optimizer = [(e["ts"], e["ts"] + e["dur"]) for e in trace
             if e.get("tid") == 1 and e.get("cat") == "optimizer" and e["name"].startswith("AdamW step")]
assert device and len(optimizer) == 6, (len(device), len(optimizer))
# Async: step t's update runs while iteration t+1 computes (the last has no next iteration to overlap). Most of
# steps 1..5's updates overlap the device's compute (sync's none: their iteration waits for them); a host
# late by the length of an update under load may start iteration t+1 after it, so 3 of 5 are asked for.
overlapped = sum(1 for a, b in optimizer[:-1] if any(min(b, d) > max(a, c) for c, d in device))
assert overlapped >= 3, f"{overlapped} of 5 updates overlap the emulated compute: {optimizer} vs {device[:10]}"
PY

# A CPU run does not start from the emulated run's layer times unless told; nor does the simulator.
if RP_NUM_THREADS=1 "${mpi[@]}" -n 2 "$bin/roundpipe_train" "${run[@]}" --set pipeline.backend=cpu --set pipeline.profile="$work/one/profile.json" \
  --set output.dir="$work/cpu" >"$work/cpu.txt" 2>&1; then
  fail "a CPU run took an emulated run's profile.json as measured"
else
  code=$?
fi
[[ $code -eq 2 ]] || { cat "$work/cpu.txt"; fail "an emulated profile on a CPU run exited with $code, not 2"; }
grep -q "pipeline.profile = .*emulated device (emulated:slow).*pipeline.profile_modelled = true" "$work/cpu.txt" ||
  { cat "$work/cpu.txt"; fail "the refusal does not name the key, the device and the override"; }
if "$bin/roundpipe_sim" --profile "$work/one/profile.json" --workers 2 >"$work/sim.txt" 2>&1; then
  fail "roundpipe_sim took an emulated run's profile.json as measured"
fi
grep -q "emulated device (emulated:slow).*--modelled-profile" "$work/sim.txt" || { cat "$work/sim.txt"; fail "the simulator's refusal"; }
"$bin/roundpipe_sim" --profile "$work/one/profile.json" --modelled-profile --workers 2 >"$work/sim.txt" 2>&1 ||
  { cat "$work/sim.txt"; fail "roundpipe_sim --modelled-profile refused the emulated profile"; }

RP_NUM_THREADS=1 "${mpi[@]}" -n 2 "$bin/roundpipe_train" "${run[@]}" --set optim.mode=sync \
  --set output.dir="$work/two" >"$work/two.txt" 2>&1 || { cat "$work/two.txt"; fail "two emulated workers (sync) failed"; }
python3 - "$work/two" <<'PY' || fail "the two-worker run's metrics"
import json, sys
rows = [json.loads(l) for l in open(f"{sys.argv[1]}/metrics.jsonl")]
assert len(rows) == 6 and all(r["device"] == "emulated:slow" and r["device_busy_ms"] > 0 for r in rows), rows
PY

# The compute's memory behaves as on the card: the built-in model's 1024-token microbatches need ~0.02 GB a layer's
# backward (the planner says so and warns), and a 0.01 GB worker runs out of memory in its first job, named as on
# a GPU (exit 2); with 0.03 GB it trains.
oom=(--config "$src/configs/builtin-fortunes.toml" --set pipeline.backend=emulated --set train.max_steps=2
     --set pipeline.emulated_profile="$work/slow.toml" --set output.sample_prompt= --set checkpoint.at_end=false)
RP_NUM_THREADS=1 "$bin/roundpipe_train" "${oom[@]}" --set pipeline.memory_limit_gb=0.03 --set output.dir="$work/fits" \
  >"$work/fits.txt" 2>&1 || { cat "$work/fits.txt"; fail "0.03 GB of emulated worker memory did not train"; }
if RP_NUM_THREADS=1 "$bin/roundpipe_train" "${oom[@]}" --set pipeline.memory_limit_gb=0.01 \
  --set output.dir="$work/oom" >"$work/oom.txt" 2>&1; then
  fail "0.01 GB of emulated worker memory trained: its compute's memory is not counted"
else
  code=$?
fi
[[ $code -eq 2 ]] || { cat "$work/oom.txt"; fail "an emulated out-of-memory exited with $code, not 2"; }
grep -q "the worker ran out of memory in the" "$work/oom.txt" || { cat "$work/oom.txt"; fail "the out-of-memory is not named"; }

# Note [Emulated checkpoints]: an emulated run's checkpoint says so, and neither export nor a real run takes it
# (its weights were never trained); an emulated run resumes it.
RP_NUM_THREADS=1 "$bin/roundpipe_train" "${oom[@]}" --set checkpoint.at_end=true --set output.dir="$work/saved" \
  --set output.sample_prompt=Hi --set output.sample_tokens=4 >"$work/saved.txt" 2>&1 ||
  { cat "$work/saved.txt"; fail "the emulated run that saves failed"; }
grep -q "^sample after: .* \[emulated:slow: untrained weights\]$" "$work/saved.txt" ||
  { cat "$work/saved.txt"; fail "the emulated run's sample is not marked untrained"; }
python3 -c 'import json, sys; d = json.load(open(sys.argv[1]))["training"]["device"]; assert d == "emulated:slow", d' \
  "$work/saved/checkpoints/step-00000002/manifest.json" || fail "the manifest does not name the emulated device"
refused() {  # <what> <command...>
  local what="$1"
  shift
  if "$@" >"$work/refused.txt" 2>&1; then fail "$what: an emulated run's checkpoint was taken"; else code=$?; fi
  [[ $code -eq 2 ]] || { cat "$work/refused.txt"; fail "$what: exit $code, not 2"; }
  grep -q "the checkpoint is a run on the emulated device (emulated:slow), which models time and computes nothing" \
    "$work/refused.txt" || { cat "$work/refused.txt"; fail "$what: not refused as an emulated run's"; }
}
refused "roundpipe_export" "$bin/roundpipe_export" --checkpoint "$work/saved/checkpoints" --output "$work/exported"
[[ -e "$work/exported" ]] && fail "the refused export wrote $work/exported"
refused "a cpu resume" env RP_NUM_THREADS=1 "$bin/roundpipe_train" "${oom[@]}" --set train.max_steps=3 \
  --set output.dir="$work/saved" --set pipeline.backend=cpu --resume latest
RP_NUM_THREADS=1 "$bin/roundpipe_train" "${oom[@]}" --set train.max_steps=3 --set output.dir="$work/saved" \
  --resume latest >"$work/resumed.txt" 2>&1 || { cat "$work/resumed.txt"; fail "an emulated resume failed"; }
echo "ok: an emulated checkpoint names its device; export and a cpu run refuse it, an emulated run resumes it"

if "$bin/roundpipe_train" "${run[@]}" --set pipeline.emulated_profile=no-such-gpu --set output.dir="$work/bad" \
  >"$work/bad.txt" 2>&1; then
  fail "an unknown profile was accepted"
else
  code=$?
fi
[[ $code -eq 2 ]] || { cat "$work/bad.txt"; fail "an unknown profile exited with $code, not 2"; }
grep -q "pipeline.emulated_profile = \"no-such-gpu\"" "$work/bad.txt" || { cat "$work/bad.txt"; fail "the error does not name the key"; }
grep -q "rtx4090x8" "$work/bad.txt" || { cat "$work/bad.txt"; fail "the error does not list the profiles there"; }
echo "PASS"
