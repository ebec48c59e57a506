#!/usr/bin/env bash
# scripts/roundpipe_plot.py draws a run's metrics.jsonl: the PNG it writes is a real 800x800 PNG, it draws
# every finite point of each curve (a skipped step's null loss is left out, evaluations are drawn), and a
# missing file or a bad line is an error naming the file (and line).
# Usage: plot_metrics.sh <python with matplotlib> <source dir>
set -uo pipefail
python="$1"; source="$2"
plot="$source/scripts/roundpipe_plot.py"
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
fail() { echo "FAIL: $*"; exit 1; }

mkdir -p "$work/run"
"$python" - "$work/run/metrics.jsonl" <<'PY'
import json, sys
with open(sys.argv[1], "w") as f:
    for step in range(1, 21):
        r = {"step": step, "loss": 4.0 / step, "lr": 1e-3, "grad_norm": 1.5, "tokens": 512, "target_tokens": 500,
             "tokens_per_s": 1000.0 + step, "step_time_s": 0.5, "epoch": 0, "mfu": 0.2}
        if step == 7:
            r.update(loss=None, grad_norm=None, skipped=True)
        if step % 10 == 0:
            r.update(eval_loss=3.0 / step, eval_ppl=2.0)
        f.write(json.dumps(r) + "\n")
PY
out=$("$python" "$plot" "$work/run" 2>&1) || fail "the plot failed: $out"
echo "$out"
[[ "$out" == "wrote $work/run/metrics.png: 20 steps; loss 19, eval_loss 2, tokens_per_s 20, mfu 20, lr 20, grad_norm 19" ]] ||
  fail "unexpected summary: $out"
"$python" - "$work/run/metrics.png" <<'PY' || fail "not the PNG expected"
import struct, sys
data = open(sys.argv[1], "rb").read()
assert data[:8] == b"\x89PNG\r\n\x1a\n", data[:8]
width, height = struct.unpack(">II", data[16:24])
assert (width, height) == (800, 800), (width, height)
PY

err=$("$python" "$plot" "$work/missing" 2>&1) && fail "a missing run was accepted"
[[ "$err" == *"$work/missing: cannot read"* ]] || fail "the missing file is not named: $err"
printf '{"step": 1, "loss": 2.0}\n{"step": 2, "loss": 1.9}\nnot json\n' >"$work/bad.jsonl"
err=$("$python" "$plot" "$work/bad.jsonl" -o "$work/bad.png" 2>&1) && fail "a bad line was accepted"
[[ "$err" == *"$work/bad.jsonl:3: not a JSON object"* ]] || fail "the bad line is not named: $err"
# An emulated device's run is marked as such: its losses are synthetic, its rates a model's.
printf '{"step": 1, "loss": 5.5, "device": "emulated:rtx4090x8"}\n{"step": 2, "loss": 5.5, "device": "emulated:rtx4090x8"}\n' >"$work/emulated.jsonl"
out=$("$python" "$plot" "$work/emulated.jsonl" -o "$work/emulated.png" 2>&1) || fail "an emulated run's plot failed: $out"
[[ "$out" == *"(emulated:rtx4090x8: synthetic losses, modelled rates)" ]] || fail "the emulated run is not marked: $out"
# A last line cut short (a full disk, a crash mid-write) is skipped with a notice naming it; the rest plots.
printf '{"step": 1, "loss": 2.0}\n{"step": 2, "loss": 1.9}\n{"step": 3, "lo' >"$work/torn.jsonl"
err=$("$python" "$plot" "$work/torn.jsonl" -o "$work/torn.png" 2>&1) || fail "a torn last line stopped the plot: $err"
[[ "$err" == *"$work/torn.jsonl:3: skipped: a torn last line"* && -s "$work/torn.png" ]] || fail "no notice or no PNG: $err"
echo "ok"
