#!/usr/bin/env bash
# The MPI gtest harness when one rank fails (test_mpi_harness_failure: rank 1 fails, ranks 0 and 2 pass): the
# job must exit non-zero, rank 1 must print its own failure with its rank, and rank 0 — whose tests passed —
# must say that another rank failed. Any other non-zero exit (a crash, a launch error) is not this and fails.
# Usage: expect_rank_failure.sh <mpiexec> <mpiexec args...> <test binary>
set -uo pipefail
out="$("$@" 2>&1)"
code=$?
fail() { echo "FAIL: $*"; echo "$out"; exit 1; }
[[ $code -ne 0 ]] || fail "the job exited 0 although rank 1 failed"
grep -q '^\[rank 1\] .*test_mpi_harness_failure.cpp:[0-9]*: failure' <<<"$out" || fail "rank 1 did not print its failure"
grep -q 'deliberate failure on rank 1' <<<"$out" || fail "rank 1's message is missing"
grep -q '^\[rank 0\] another rank failed' <<<"$out" || fail "rank 0 did not report that another rank failed"
if grep -q '^\[rank [02]\] .*: failure' <<<"$out"; then fail "a rank that passed printed a failure"; fi
echo "ok: the job failed with exit code $code, naming rank 1"
