#!/usr/bin/env bash
# scripts/gpu-check.sh's plan, dry (CPU backend, tiny shapes): both parts pass within their budgets and write what
# a lent GPU machine's call brings back (results.json with every step and its command, results.md; at most 8
# files, at most two folders down), G1 comes out of the first part and G2's async run and the ladder out of the
# second, the peer is recorded as skipped (it needs CUDA), and a budget too small for the plan skips the steps that do not fit instead of
# running over. Usage: gpu_check_dry_run.sh <build dir> <python with torch>
set -uo pipefail
build="$1"; python="$2"
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
fail() { echo "FAIL: $*"; for f in "$work"/*/log.txt; do echo "--- $f"; tail -20 "$f"; done; exit 1; }
run() {  # <out> <part> <budget>: the part's exit code; fails when it outlasts its budget by more than 15 s
  local t0=$SECONDS rc
  RP_GPU_DRY_RUN=1 RP_BUILD_DIR="$build" RP_PYTHON="$python" OUT="$work/$1" \
    "$root/scripts/gpu-check.sh" --part "$2" --budget "$3" >"$work/$1.stdout" 2>&1
  rc=$?
  (( SECONDS - t0 <= $3 + 15 )) || fail "--part $2 --budget $3 took $((SECONDS - t0)) s"
  return $rc
}
run tests build+tests 300 || fail "--part build+tests exited non-zero: $(tail -5 "$work/tests.stdout")"
run bench bench 300 || fail "--part bench exited non-zero: $(tail -5 "$work/bench.stdout")"
run short bench 25 || fail "--part bench --budget 25 exited non-zero: a skipped step is not a failure"
python3 - "$work" <<'PY' || fail "the results"
import json, os, re, sys
work = sys.argv[1]
def results(name):
    r = json.load(open(os.path.join(work, name, "results.json")))
    assert r["dry_run"] is True, name
    assert os.path.getsize(os.path.join(work, name, "results.md")) > 0, name
    files = [os.path.relpath(os.path.join(d, f), os.path.join(work, name))
             for d, _, fs in os.walk(os.path.join(work, name)) for f in fs]
    assert len(files) <= 8, f"{name}: {len(files)} files come back from $OUT, at most 8: {files}"
    for f in files:
        assert f.count("/") <= 2 and re.fullmatch(r"[A-Za-z0-9._/-]+", f), f"{name}: {f} would not come back"
    return r, {s["name"]: s for s in r["steps"]}
tests, steps = results("tests")
for step in ("build", "tests", "tests-summary", "link-order"):
    assert steps[step]["status"] == "ok", steps[step]
assert steps["build"]["command"].startswith("cmake --build"), steps["build"]
assert "skipped" in steps["tests-summary"]["detail"], steps["tests-summary"]
for step in ("G1-host-sync", "G1-no-upload-sync"):
    assert steps[step]["status"] == "ok" and "roundpipe_train" in steps[step]["command"], steps[step]
assert "RP_BENCH_NO_UPLOADS=1" in steps["G1-no-upload-sync"]["command"], steps["G1-no-upload-sync"]
assert "G1" in {f["id"] for f in tests["figures"]}, tests["figures"]
bench, steps = results("bench")
assert steps["G2-ours-async"]["status"] == "ok" and "optim.mode=async" in steps["G2-ours-async"]["command"]
assert steps["G2-peer"]["status"] == "skipped" and "CUDA" in steps["G2-peer"]["detail"], steps["G2-peer"]
emulated = steps["G2-emulated-async"]  # the emulated row beside the real one (docs/emulated.md, "Calibration")
assert emulated["status"] == "ok" and "pipeline.backend=emulated" in emulated["command"] and \
    "pipeline.emulated_profile=h100-measured" in emulated["command"], emulated
assert "EMU" in {f["id"] for f in bench["figures"]}, bench["figures"]
rungs = [s for s in bench["steps"] if s["name"].startswith("ladder-ours-")]
assert rungs and all(s["status"] == "ok" for s in rungs), rungs
assert "G2-max-seq" in {f["id"] for f in bench["figures"]}, bench["figures"]
short, steps = results("short")
skipped = [s for s in short["steps"] if s["status"] == "skipped" and s["detail"].startswith("budget")]
assert skipped, f"a 25 s budget skipped nothing: {short['steps']}"
print(f"ok: both parts within budget; {len(rungs)} ladder rungs; a 25 s budget skipped {len(skipped)} step(s)")
PY
