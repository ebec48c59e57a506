#!/usr/bin/env bash
# The emulated device as the runtime's compute-sanitizer (Note [Device sanitizer], docs/emulated.md): a run whose
# device runs well behind its host (a 3 ms kernel floor, a 0.1 GB/s link) on a plan with a forward, a fused and a
# backward job is clean; each of four stream-ordering mistakes put into the engine (RP_TEST_MUTATE) — an activation
# read without computeAfter, gradient marks taken over the first microbatch, a slot release ignored while the slot
# holds an earlier mark, a weight copy given the mark of the job before the slot's last — and a fifth, a job that
# computes without waiting for its weights, makes the rank fail naming the violation, both operations and the
# memory. On the CPU backend a mutation is refused.
# Usage: emulated_sanitizer.sh <bin dir> <source dir> <mpiexec> [mpiexec flags...]
set -euo pipefail
bin="$1" src="$2"
shift 2
mpi=("$@")
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
fail() { echo "FAIL: $*"; exit 1; }
[[ -d /usr/share/games/fortunes ]] || fail "/usr/share/games/fortunes is missing (scripts/bootstrap.sh installs fortunes)"
source "$src/tests/support/slow_gpu.sh"
slow_gpu_profile "$work/slow.toml" 0.25 0.2 3000
run=(--config "$src/configs/builtin-fortunes.toml" --set pipeline.backend=emulated
     --set pipeline.emulated_profile="$work/slow.toml" --set "pipeline.plan=3 | 2 | 3" --set train.max_steps=2
     --set optim.threads=1 --set output.sample_prompt= --set checkpoint.at_end=false)
cd "$src"

RP_NUM_THREADS=1 "$bin/roundpipe_train" "${run[@]}" --set output.dir="$work/clean" >"$work/clean.txt" 2>&1 ||
  { cat "$work/clean.txt"; fail "the unmutated run failed"; }
grep -q "plan fwd 0-2 | fused 3-5 | bwd 0-2" "$work/clean.txt" || { cat "$work/clean.txt"; fail "the plan"; }

red() {  # <mutation> <headline> <memory>
  local out="$work/$1.txt"
  if RP_TEST_MUTATE="$1" RP_NUM_THREADS=1 "$bin/roundpipe_train" "${run[@]}" --set output.dir="$work/$1" >"$out" 2>&1; then
    cat "$out"
    fail "$1: the sanitizer did not report it"
  fi
  grep -q "emulated device sanitizer (Slow GPU): $2: $3; earlier: .*; later: .* ordered to start at" "$out" ||
    { cat "$out"; fail "$1: not reported as '$2' on $3"; }
  echo "$1: $(grep -o 'emulated device sanitizer.*' "$out" | head -1)"
}
red activation-without-compute-after "a compute reads memory before the copy that fills it lands" "fetched input #[0-9]*"
red gradient-marks-first-microbatch "a copy reads memory an earlier compute is still writing" "the gradients of layer [0-9]"
red slot-release-keeps-first-mark "a copy writes memory an earlier compute still reads" "stage slot [01]"
red weight-copy-previous-mark "a copy writes memory an earlier compute still reads" "stage slot [01]"
red weights-not-awaited "a compute reads memory its copy has not finished writing" "stage slot [01]"
# Two ranks: the rank that finds a violation ends the job, at once and named (no rank left waiting on it).
start=$SECONDS
if RP_TEST_MUTATE=activation-without-compute-after RP_NUM_THREADS=1 timeout 120 "${mpi[@]}" -n 2 "$bin/roundpipe_train" \
  "${run[@]}" --set "pipeline.plan=auto" --set output.dir="$work/two" >"$work/two.txt" 2>&1; then
  cat "$work/two.txt"
  fail "two ranks: the sanitizer did not report the mutation"
fi
grep -q "r[01] E\] emulated device sanitizer (Slow GPU): a compute reads memory before the copy" "$work/two.txt" &&
  grep -q "rank [01] failed; ending the job of 2 ranks" "$work/two.txt" ||
  { cat "$work/two.txt"; fail "two ranks: the violation or the rank that ended the job is not named"; }
((SECONDS - start < 60)) || fail "two ranks: the job took $((SECONDS - start)) s to end"

# A mutation is the sanitizer's test alone: elsewhere it would only race (two CPU ranks: the pipeline runtime).
if RP_TEST_MUTATE=weights-not-awaited RP_NUM_THREADS=1 "${mpi[@]}" -n 2 "$bin/roundpipe_train" "${run[@]}" \
  --set pipeline.backend=cpu --set "pipeline.plan=auto" \
  --set output.dir="$work/cpu" >"$work/cpu.txt" 2>&1; then
  fail "RP_TEST_MUTATE was taken on the CPU backend"
fi
grep -q "RP_TEST_MUTATE = \"weights-not-awaited\" puts an ordering mistake into the engine" "$work/cpu.txt" ||
  { cat "$work/cpu.txt"; fail "the refusal of RP_TEST_MUTATE on the CPU backend"; }
echo "PASS"
