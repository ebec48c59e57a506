#!/usr/bin/env bash
# The test command: installs what is missing, builds, runs the test tiers through CTest (labels unit, mpi,
# golden, gpu, cluster, fuzz; docs/testing.md). Exit code = result. The last line is the count:
# `test.sh: N passed, M failed, K skipped (<label> k, ...)`, skips apart from passes (scripts/test_summary.py).
#   scripts/test.sh [ctest args]        the default suite: every tier but the cases labelled long, two at a time
#   scripts/test.sh --all [ctest args]  everything: the full in-process matrix, MPI at 3 ranks, mutation fuzzing
#                                       (a clang build of its own), and the benchmarks built
# Extra arguments go to ctest (e.g. -L unit, -R Safetensors). RP_TEST_JOBS sets ctest's parallelism (default 2).
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
all=0
if [[ "${1:-}" == --all ]]; then
  all=1
  shift
fi
start=$SECONDS
"$root/scripts/bootstrap.sh"
echo "test.sh: bootstrap took $((SECONDS - start)) s"
start=$SECONDS
if ((all)); then
  "$root/scripts/build.sh" --target all rp_benchmarks
else
  "$root/scripts/build.sh"
fi
echo "test.sh: build took $((SECONDS - start)) s"
cd "${RP_BUILD_DIR:-$root/build}"
select=(-LE long)
((all)) && select=()
start=$SECONDS
status=0
# Open MPI probes its matching-transport components (PSM, PSM2, OFI: fabrics these machines lack) in every
# process that starts MPI, ~0.35 s each, mostly asleep, before it settles on ob1 anyway: every rank of every
# mpirun and every run of the tools in the tests paid it (docs/testing.md, "Timings"). A caller's choice wins.
export OMPI_MCA_pml="${OMPI_MCA_pml:-ob1}"
results="$(mktemp -d)"
trap 'rm -rf "$results"' EXIT
# Every test's labels and properties for the summary, listed first: a listing run writes ctest's LastTest.log,
# which should be the suite's.
ctest --show-only=json-v1 >"$results/tests.json"
ctest --output-on-failure --no-tests=error -j "${RP_TEST_JOBS:-2}" --output-junit "$results/junit.xml" \
  "${select[@]}" "$@" || status=$?
echo "test.sh: ctest took $((SECONDS - start)) s"
# The last line counts skips apart from passes, by label (ctest's "tests passed" counts them as passed).
if [[ -s "$results/junit.xml" ]]; then
  python3 "$root/scripts/test_summary.py" "$results/junit.xml" "$results/tests.json" || { ((status)) || status=1; }
else
  echo "test.sh: no results to summarise (ctest exited $status)"
  ((status)) || status=1
fi
exit $status
