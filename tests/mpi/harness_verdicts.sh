#!/usr/bin/env bash
# The MPI gtest harness's verdicts (test_mpi_harness, 3 ranks). When one rank fails (rank 1 fails, ranks 0 and 2
# pass) the job must exit 1, rank 1 must print its own failure with its rank, and rank 0 — whose tests passed —
# must say that another rank failed; beside a skipped case the failure must still be exit 1, never the skip code
# (77) that CTest would report as a skip, also where the other ranks skipped every case; every case skipped is 77; a skip beside a pass is 0, counted.
# Any other exit (a crash, a launch error) is not one of these and fails.
# Usage: harness_verdicts.sh <mpiexec> <mpiexec args...> <test binary>
set -uo pipefail
out=""
run() { out="$("$@" 2>&1)"; code=$?; }
fail() { echo "FAIL: $*"; echo "$out"; exit 1; }

run "$@" --gtest_filter=MpiHarness.FailsOnOneRankOnly
[[ $code -eq 1 ]] || fail "one rank failing: the job exited $code, expected 1"
grep -q '^\[rank 1\] .*test_mpi_harness.cpp:[0-9]*: failure' <<<"$out" || fail "rank 1 did not print its failure"
grep -q 'deliberate failure on rank 1' <<<"$out" || fail "rank 1's message is missing"
grep -q '^\[rank 0\] another rank failed' <<<"$out" || fail "rank 0 did not report that another rank failed"
if grep -q '^\[rank [02]\] .*: failure' <<<"$out"; then fail "a rank that passed printed a failure"; fi

run "$@" --gtest_filter=MpiHarness.FailsOnOneRankOnly:MpiHarness.Skips
[[ $code -eq 1 ]] || fail "a failure beside a skip: the job exited $code, expected 1 (77 would read as skipped)"

run "$@" --gtest_filter=MpiHarness.FailsOnRankOneSkipsElsewhere
[[ $code -eq 1 ]] || fail "rank 1 failing while the others skip everything: the job exited $code, expected 1"

run "$@" --gtest_filter=MpiHarness.Skips
[[ $code -eq 77 ]] || fail "every case skipped: the job exited $code, expected 77"
grep -q '^SKIPPED: every one of the 1 selected case(s) skipped' <<<"$out" || fail "the skip was not announced"

run "$@" --gtest_filter=MpiHarness.Skips:MpiHarness.Passes
[[ $code -eq 0 ]] || fail "a skip beside a pass: the job exited $code, expected 0"
grep -q '^\[rank 0\] 1 case(s) passed, 1 skipped' <<<"$out" || fail "the skipped case was not counted"

run "$@" --gtest_filter=NoSuch.Case
[[ $code -eq 1 ]] || fail "a filter that selects nothing: the job exited $code, expected 1"
echo "ok: one rank's failure is exit 1 (alone and beside a skip), all skipped is 77, a skip beside a pass is 0"
