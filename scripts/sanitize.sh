#!/usr/bin/env bash
# The unit tier under a sanitizer (docs/testing.md, "Sanitizers"):
#   scripts/sanitize.sh address [ctest args]   ASan + UBSan, build-asan/
#   scripts/sanitize.sh thread  [ctest args]   TSan, build-tsan/
# Configures that directory (every target instrumented; LibTorch, Open MPI, HDF5 are not), builds the unit tier
# (target rp_unit_tier, or the targets in RP_SANITIZE_TARGETS), then runs `ctest -L unit` there (ctest args narrow
# it, e.g. -R 'unit\.(Fences|PipelineInproc)'), with the suppressions in tests/sanitizers/ (each says why);
# under ASan the command-line tests run in a second pass without leak detection (see below).
# Exit code = result. CC/CXX pick the compiler (clang, as the fuzz build, or g++).
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
kind="${1:-}"
shift || true
case "$kind" in
  address) flags="address,undefined" build="$root/build-asan" ;;
  thread) flags="thread" build="$root/build-tsan" ;;
  *) echo "usage: scripts/sanitize.sh address|thread [ctest args]" >&2; exit 2 ;;
esac
mkdir -p "$build"
cmake -S "$root" -B "$build" -DRP_SANITIZE="$flags" -DRP_BUILD_BENCHMARKS=OFF -DRP_WITH_CUDA=OFF -DRP_WITH_NCCL=OFF \
  -DRP_WERROR=ON >"$build/configure.log" 2>&1 || {
  cat "$build/configure.log"
  exit 1
}
# shellcheck disable=SC2086 # a list of targets
cmake --build "$build" -j "${RP_JOBS:-2}" --target ${RP_SANITIZE_TARGETS:-rp_unit_tier}
# One compute thread per process: LibTorch's OpenMP pool is not instrumented (TSan cannot see its barriers).
export OMP_NUM_THREADS=1 RP_NUM_THREADS=1
# protect_shadow_gap=0: the CUDA runtime maps memory where ASan's shadow gap is (on GPU machines).
export ASAN_OPTIONS="detect_leaks=1:protect_shadow_gap=0${ASAN_OPTIONS:+:$ASAN_OPTIONS}"
export LSAN_OPTIONS="suppressions=$root/tests/sanitizers/lsan.supp:print_suppressions=0${LSAN_OPTIONS:+:$LSAN_OPTIONS}"
export UBSAN_OPTIONS="print_stacktrace=1:halt_on_error=1${UBSAN_OPTIONS:+:$UBSAN_OPTIONS}"
export TSAN_OPTIONS="suppressions=$root/tests/sanitizers/tsan.supp:halt_on_error=1:second_deadlock_stack=1${TSAN_OPTIONS:+:$TSAN_OPTIONS}"
cd "$build"
if [[ "$kind" == thread ]]; then
  exec ctest -L unit --output-on-failure --no-tests=error "$@"
fi
# Open MPI's components leak and are unloaded (dlclose) before LeakSanitizer reports, so their frames read
# "<unknown module>" and no suppression can name them: the command-line tests, whose processes initialise MPI,
# run with leak detection off (memory errors and undefined behaviour still stop them); the library code they
# run is leak-checked in the unit binaries. ctest args narrow the first pass only.
rc=0
ctest -L unit -E '^unit\.cli\.' --output-on-failure "$@" || rc=$?
ASAN_OPTIONS="$ASAN_OPTIONS:detect_leaks=0" ctest -L unit -R '^unit\.cli\.' --output-on-failure || rc=$?
exit "$rc"
