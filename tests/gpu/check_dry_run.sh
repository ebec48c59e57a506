#!/usr/bin/env bash
# scripts/gpu-check.sh's plan, dry (CPU backend, tiny shapes): both parts pass within their budgets and write what
# a lent GPU machine's call brings back (results.json with every step and its command, results.md; at most 8
# files, at most two folders down), G1 comes out of the first part and G2's async run, the reference's row before
# the emulated one, the emulated device's calibration and the ladder out of the second, the peer is recorded as
# skipped (it needs CUDA), and a budget too small for the plan skips the steps that do not fit instead of
# running over. What it holds the record to could come out wrong: results.json's schema (the one a device run
# fills, scripts/gpu_report.py), the part's steps and their order, the tests' count against this build's own list of
# GPU tests (every one ran, none failed), the budget arithmetic (the steps' time within the budget, a step skipped
# for the budget only when what was left could not hold it). Usage: gpu_check_dry_run.sh <build dir> <python with torch>
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
# This build's GPU tests, listed apart from the suite's build directory (its ctest logs are the suite's).
mkdir -p "$work/list" && printf 'subdirs("%s")\n' "$(realpath -m "$build")" >"$work/list/CTestTestfile.cmake"
gpu_tests=$(cd "$work/list" && ctest -N -L '^gpu$' | sed -nE 's/^Total Tests: ([0-9]+)$/\1/p')
[[ -n "$gpu_tests" ]] || fail "ctest -N -L '^gpu\$' listed no count"
python3 - "$work" "$gpu_tests" "$(git -C "$root" rev-parse --short HEAD)" <<'PY' || fail "the results"
import json, os, re, sys
work, gpu_tests, head = sys.argv[1], int(sys.argv[2]), sys.argv[3]
STATUSES = {"ok", "failed", "timeout", "skipped"}
def results(name, part, budget):
    r = json.load(open(os.path.join(work, name, "results.json")))
    assert r["dry_run"] is True, name
    # The schema scripts/gpu_report.py documents, which the device run fills and docs/gpu.md reads.
    assert set(r) == {"part", "dry_run", "device", "commit", "torch", "started", "budget_s", "steps", "figures"}, r.keys()
    assert r["part"] == part and r["budget_s"] == budget, (r["part"], r["budget_s"])
    assert r["commit"].startswith(head), (r["commit"], head)
    for s in r["steps"]:
        assert set(s) == {"name", "status", "seconds", "command", "detail"}, s
        assert s["status"] in STATUSES and isinstance(s["seconds"], (int, float)) and s["seconds"] >= 0, s
        assert s["status"] != "skipped" or s["detail"], f"{name}: a skip without its reason: {s}"
    for f in r["figures"]:
        assert set(f) == {"id", "name", "value", "unit", "command", "detail"}, f
    # The budget arithmetic: the steps' time within the part's budget (the part's own run was held to it above).
    spent = sum(s["seconds"] for s in r["steps"])
    assert spent <= budget + 15, f"{name}: steps took {spent} s of a {budget} s budget"
    assert os.path.getsize(os.path.join(work, name, "results.md")) > 0, name
    files = [os.path.relpath(os.path.join(d, f), os.path.join(work, name))
             for d, _, fs in os.walk(os.path.join(work, name)) for f in fs]
    assert len(files) <= 8, f"{name}: {len(files)} files come back from $OUT, at most 8: {files}"
    for f in files:
        assert f.count("/") <= 2 and re.fullmatch(r"[A-Za-z0-9._/-]+", f), f"{name}: {f} would not come back"
    return r, {s["name"]: s for s in r["steps"]}
tests, steps = results("tests", "build+tests", 300)
for step in ("build", "tests", "tests-summary", "link-order"):
    assert steps[step]["status"] == "ok", steps[step]
# The part's plan, in order (carry, deps and configure come first where they apply; the bench records its runs).
order = [s["name"] for s in tests["steps"] if s["name"] in ("build", "tests", "tests-summary", "link-order", "bench-g1")]
assert order == ["build", "tests", "tests-summary", "link-order", "bench-g1"], order
assert steps["build"]["command"].startswith("cmake --build"), steps["build"]
# The tests' count: every GPU test of this build ran, none failed, and those that need a device skipped.
m = re.fullmatch(r"(\d+) tests: (\d+) passed, (\d+) failed, (\d+) skipped", steps["tests-summary"]["detail"])
assert m, steps["tests-summary"]
total, passed, failed, skipped = map(int, m.groups())
assert total == gpu_tests and failed == 0 and skipped >= 1 and passed + skipped == total, (m.groups(), gpu_tests)
for step in ("G1-host-sync", "G1-no-upload-sync"):
    assert steps[step]["status"] == "ok" and "roundpipe_train" in steps[step]["command"], steps[step]
assert "RP_BENCH_NO_UPLOADS=1" in steps["G1-no-upload-sync"]["command"], steps["G1-no-upload-sync"]
assert "G1" in {f["id"] for f in tests["figures"]}, tests["figures"]
bench, steps = results("bench", "bench", 300)
assert steps["G2-ours-async"]["status"] == "ok" and "optim.mode=async" in steps["G2-ours-async"]["command"]
assert steps["G2-peer"]["status"] == "skipped" and "CUDA" in steps["G2-peer"]["detail"], steps["G2-peer"]
emulated = steps["G2-emulated-async"]  # the emulated row beside the real one (docs/emulated.md, "Calibration")
assert emulated["status"] == "ok" and "pipeline.backend=emulated" in emulated["command"] and \
    "pipeline.emulated_profile=h100-measured" in emulated["command"], emulated
assert "EMU" in {f["id"] for f in bench["figures"]}, bench["figures"]
# Its calibration from both runs' per-layer times (profile.json), recorded even where they cannot be compared.
assert "EMU-compute" in {f["id"] for f in bench["figures"]}, bench["figures"]
# The headline row before the emulated one: a slow start must not cost the reference's run.
names = [s["name"] for s in bench["steps"]]
assert names.index("G2-ours-async") < names.index("G2-peer") < names.index("G2-emulated-async"), names
rungs = [s for s in bench["steps"] if s["name"].startswith("ladder-ours-")]
assert rungs and all(s["status"] == "ok" for s in rungs), rungs
assert "G2-max-seq" in {f["id"] for f in bench["figures"]}, bench["figures"]
short, steps = results("short", "bench", 25)
skipped = [s for s in short["steps"] if s["status"] == "skipped" and s["detail"].startswith("budget")]
assert skipped, f"a 25 s budget skipped nothing: {short['steps']}"
# A step is skipped for the budget only when what was left could not give it 5 s beyond the 10 s margin, and
# what was left is at most the budget less the steps before it.
done = 0.0
for s in short["steps"]:
    if s in skipped:
        left = int(re.fullmatch(r"budget: (-?\d+) s left", s["detail"]).group(1))
        assert left < 15 and left <= 25 - done, f"skipped with {left} s left after {done} s of steps: {s}"
    done += s["seconds"]
print(f"ok: both parts within budget; {len(rungs)} ladder rungs; a 25 s budget skipped {len(skipped)} step(s)")
PY
