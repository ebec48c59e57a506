#!/usr/bin/env bash
# The GPU tier's MPI cases: runs `mpiexec <args>` (a gtest binary under mpiexec, cases selected by name) with
# RP_REQUIRE_FIXTURES=1 and RP_GOLDEN_DIR passed to every rank, and fails unless at least one case ran and
# none skipped: on a GPU machine a wrapper that selects cases by name must never pass by testing nothing.
# Usage: run_gtest_gpu.sh <mpiexec> [mpiexec args and the binary's...]   (stdout: the job's output)
set -uo pipefail
log="$(mktemp)"
trap 'rm -f "$log"' EXIT
mpiexec="$1"; shift
# Open MPI gives each rank a pseudo-terminal, so gtest colours its result lines where TERM allows (the first H100
# run's "[       OK ]" came wrapped in escapes and this script saw no case): no colour, and escapes stripped anyway.
GTEST_COLOR=no RP_REQUIRE_FIXTURES=1 "$mpiexec" -x GTEST_COLOR -x RP_REQUIRE_FIXTURES -x RP_GOLDEN_DIR -x RP_TEST_SETS \
  "$@" 2>&1 | tee "$log"
rc=${PIPESTATUS[0]}
# Every case skipped (the MPI main's 77, which CTest would report as a skip) is a failure here, as one is.
if ((rc == 77)); then echo "FAIL: every case skipped on a GPU machine"; exit 1; fi
((rc == 0)) || exit "$rc"
sed -i 's/\x1b\[[0-9;]*m//g' "$log"
ran=$(grep -c '^\[       OK \]' "$log" || true)
if grep -q '^\[  SKIPPED \]' "$log"; then echo "FAIL: a case skipped on a GPU machine"; exit 1; fi
if ((ran == 0)); then echo "FAIL: no test case ran"; exit 1; fi
echo "ok: $ran case result(s), none skipped"
