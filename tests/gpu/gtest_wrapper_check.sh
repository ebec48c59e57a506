#!/usr/bin/env bash
# run_gtest_gpu.sh's verdicts on a job's output, with a stand-in for mpiexec that prints a given transcript:
# gtest's coloured result lines (what Open MPI's pseudo-terminals produce) count as cases; zero cases, a skipped
# case, a failing job, or a job whose every case skipped (exit 77) fail. Usage: gtest_wrapper_check.sh
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
cat >"$work/mpiexec" <<'STANDIN'
#!/usr/bin/env bash
while [[ "${1:-}" == -x ]]; do shift 2; done
[[ "$GTEST_COLOR" == no ]] || { echo "GTEST_COLOR not passed as 'no'"; exit 3; }
printf '%b' "$TRANSCRIPT"
exit "${JOB_RC:-0}"
STANDIN
chmod +x "$work/mpiexec"

expect() {  # expect <pass|fail> <what> <transcript> [job rc]
  local want="$1" what="$2" got=pass
  TRANSCRIPT="$3" JOB_RC="${4:-0}" bash "$here/run_gtest_gpu.sh" "$work/mpiexec" binary >"$work/out" 2>&1 || got=fail
  if [[ "$got" != "$want" ]]; then echo "FAIL: $what: expected $want, got $got"; cat "$work/out"; exit 1; fi
  echo "ok: $what: $got"
}
expect pass "a coloured OK line" '\e[0;32m[       OK ] \e[mModels/Equivalence.X/tinystories_direct (2595 ms)\n'
expect pass "a plain OK line" '[       OK ] Models/Equivalence.X/a (1 ms)\n'
expect fail "no case ran" '\e[0;32m[  PASSED  ] \e[m0 tests.\n'
expect fail "a coloured skip" '\e[0;33m[  SKIPPED ] \e[mX/a\n[       OK ] X/b (1 ms)\n'
expect fail "the job failed" '[       OK ] X/a (1 ms)\n' 1
expect fail "every case skipped (the job's exit 77)" 'SKIPPED: every one of the 2 selected case(s) skipped\n' 77
