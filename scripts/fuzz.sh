#!/usr/bin/env bash
# The libFuzzer targets (tests/fuzz, docs/testing.md "Fuzzing"): builds them with clang, ASan and UBSan into
# ${RP_FUZZ_BUILD_DIR:-build-fuzz} and runs each over its corpus (${RP_FUZZ_CORPUS:-.fuzz-corpus}/<target>,
# seeded from the target's own examples and the shared fixtures).
#   scripts/fuzz.sh --smoke                 every target for 20000 executions or 60 s, whichever comes first
#                                           (`scripts/test.sh --all`, test fuzz.smoke)
#   scripts/fuzz.sh --replay [target...]    only the committed findings (tests/fuzz/regressions/<target>/), each
#                                           input once under ASan + UBSan, the sanitizers that found them (the
#                                           default suite's fuzz.replay.* runs them unsanitized: an overflow or an
#                                           out-of-bounds write there passes). `scripts/test.sh --all`, test
#                                           fuzz.replay_sanitized
#   scripts/fuzz.sh [--runs N] [target...]  long runs: N executions each (default 1000000), all targets by default
#   --seed S                                libFuzzer's -seed (default 1, logged): a run is repeatable
#   --max-time S                            a time cap per target in seconds (default none; 60 with --smoke)
# Prints one line per target (executions, seconds, corpus size); exits non-zero on the first finding, whose
# input is kept in ${RP_FUZZ_CORPUS}/crashes/ (reproduce: build-fuzz/tests/fuzz/fuzz_<target> <that file>).
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
build="${RP_FUZZ_BUILD_DIR:-$root/build-fuzz}"
corpora="${RP_FUZZ_CORPUS:-$root/.fuzz-corpus}"
runs=1000000
seed=1
max_time=0
replay=0
targets=()
while (($#)); do
  case "$1" in
    --smoke) runs=20000; max_time=60 ;;
    --replay) replay=1 ;;
    --runs) runs="$2"; shift ;;
    --seed) seed="$2"; shift ;;
    --max-time) max_time="$2"; shift ;;
    -*) echo "fuzz.sh: unknown option $1 (expected --smoke, --replay, --runs N, --seed S, --max-time S, target names)" >&2; exit 2 ;;
    *) targets+=("$1") ;;
  esac
  shift
done
all=(safetensors model_config tokenizer records chat_template corpus run_config manifest shard profile trace)
((${#targets[@]})) || targets=("${all[@]}")

command -v clang++ >/dev/null || { echo "fuzz.sh: clang++ not found (scripts/bootstrap.sh installs it)" >&2; exit 1; }
mkdir -p "$build"
CC=clang CXX=clang++ cmake -S "$root" -B "$build" -DRP_FUZZ=ON -DRP_BUILD_TESTS=OFF -DRP_BUILD_BENCHMARKS=OFF \
  -DRP_WITH_CUDA=OFF -DRP_WITH_NCCL=OFF -DRP_WERROR=ON >"$build/configure.log" 2>&1 || {
  cat "$build/configure.log"
  exit 1
}
if ((replay)); then  # only the targets with committed findings
  mapfile -t targets < <(for t in "${targets[@]}"; do [[ -d "$root/tests/fuzz/regressions/$t" ]] && echo "$t"; done)
  ((${#targets[@]})) || { echo "fuzz.sh: no committed finding to replay" >&2; exit 1; }
  cmake --build "$build" -j "${RP_JOBS:-2}" --target "${targets[@]/#/fuzz_}"
else
  cmake --build "$build" -j "${RP_JOBS:-2}" --target rp_fuzzers
fi

export ASAN_OPTIONS="detect_leaks=1:allocator_may_return_null=1${ASAN_OPTIONS:+:$ASAN_OPTIONS}"
export UBSAN_OPTIONS="print_stacktrace=1:halt_on_error=1${UBSAN_OPTIONS:+:$UBSAN_OPTIONS}"
mkdir -p "$corpora/crashes"
# The targets' scratch files: removed at exit by each target, and here too (a target that crashed cannot).
export TMPDIR="$corpora/tmp"
rm -rf "$TMPDIR" && mkdir -p "$TMPDIR"
trap 'rm -rf "$TMPDIR"' EXIT
if ((replay)); then
  # Each committed finding once (libFuzzer runs the files it is given and exits); a sanitizer report fails it.
  replayed=0
  for t in "${targets[@]}"; do
    bin="$build/tests/fuzz/fuzz_$t" regressions="$root/tests/fuzz/regressions/$t"
    [[ -x "$bin" ]] || { echo "fuzz.sh: no target '$t' (have: ${all[*]})" >&2; exit 2; }
    mapfile -t inputs < <(find "$regressions" -type f | sort)
    if ! "$bin" -timeout=10 -rss_limit_mb=2048 "${inputs[@]}" >"$corpora/$t.replay.log" 2>&1; then
      tail -40 "$corpora/$t.replay.log"
      echo "fuzz.sh: fuzz_$t: a committed finding fails again under the sanitizers (log: $corpora/$t.replay.log)" >&2
      exit 1
    fi
    printf '%-14s %3d finding(s) replayed under ASan + UBSan\n' "$t" "${#inputs[@]}"
    replayed=$((replayed + ${#inputs[@]}))
  done
  ((replayed > 0)) || { echo "fuzz.sh: no committed finding to replay" >&2; exit 1; }
  exit 0
fi
cap=""
((max_time > 0)) && cap=" or $max_time s"
echo "fuzz.sh: -seed=$seed, at most $runs executions$cap per target"
printf '%-14s %12s %9s %8s\n' target executions seconds corpus
for t in "${targets[@]}"; do
  bin="$build/tests/fuzz/fuzz_$t"
  [[ -x "$bin" ]] || { echo "fuzz.sh: no target '$t' (have: ${all[*]})" >&2; exit 2; }
  corpus="$corpora/$t" seeds="$corpora/seeds/$t" regressions="$root/tests/fuzz/regressions/$t"
  mkdir -p "$corpus"
  extra=()
  [[ -d "$regressions" ]] && extra+=("$regressions")
  RP_FUZZ_SEEDS="$seeds" "$bin" >/dev/null 2>&1
  log="$corpora/$t.log"
  # Findings fixed stay in tests/fuzz/regressions/<target>/ and are run first, every time.
  if ! "$bin" -seed="$seed" -runs="$runs" -max_total_time="$max_time" -max_len=8192 -timeout=10 -rss_limit_mb=2048 -print_final_stats=1 \
      -dict="$root/tests/fuzz/fuzz.dict" -artifact_prefix="$corpora/crashes/$t-" "$corpus" "$seeds" "${extra[@]}" >"$log" 2>&1; then
    tail -40 "$log"
    echo "fuzz.sh: fuzz_$t found a problem; the input is in $corpora/crashes/ (log: $log)" >&2
    exit 1
  fi
  execs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log")
  seconds=$(sed -n 's/^Done [0-9]* runs in \([0-9]*\) second.*/\1/p' "$log")
  printf '%-14s %12s %9s %8s\n' "$t" "${execs:-?}" "${seconds:-?}" "$(find "$corpus" -type f | wc -l)"
done
