#!/usr/bin/env bash
# The README's mpirun lines as a user types them (docs/launch.md, "Signals"):
#  1. every mpirun line of the README gives the ranks time to save (--mca odls_base_sigkill_timeout);
#  2. its tiny-finetune line, stopped by SIGTERM to mpirun alone once it has logged a step (what `timeout
#     --foreground`, `kill` or `docker stop` send; from a script plain `timeout` would also signal the whole process
#     group, docs/launch.md), leaves a checkpoint of the last step: the ranks save and exit 3, mpirun non-zero;
#  3. the same line without the flag logs one warning at start naming it;
#  and the line plans what it shows: no worker left idle by the plan.
# Usage: readme_mpirun.sh <source dir> <roundpipe_train> <fixtures dir> <mpiexec flags...>
set -uo pipefail
src="$1" train="$2" fixtures="$3"
shift 3
flags=("$@")  # what the README says to add as root / with more ranks than cores
model="$fixtures/models/tinystories-656k"
if [[ ! -d "$model" ]]; then echo "SKIP: $model not found"; exit 77; fi
work="$(mktemp -d)"
trap '[[ -n "${RP_KEEP:-}" ]] || rm -rf "$work"' EXIT
fail() { echo "FAIL: $*"; exit 1; }

lines=$(grep -E '^mpirun ' "$src/README.md")
[[ -n "$lines" ]] || fail "the README has no mpirun line"
missing=$(grep -v -- '--mca odls_base_sigkill_timeout' <<<"$lines")
[[ -z "$missing" ]] || fail "README mpirun lines without the kill timeout: $missing"
echo "ok: $(wc -l <<<"$lines") README mpirun lines carry --mca odls_base_sigkill_timeout"

line=$(grep -E '^mpirun .*--config configs/tiny-finetune.toml' <<<"$lines" | head -1)
[[ -n "$line" ]] || fail "no README mpirun line for configs/tiny-finetune.toml"
line="${line%%#*}"                                   # the comment
read -r -a words <<<"${line//build\/src\/cli\/roundpipe_train/$train}"
[[ " ${words[*]} " == *" $train "* ]] || fail "the README line names no build/src/cli/roundpipe_train: $line"
# The README's own command; the flags the README asks for as root; the fixtures where they are here, a run that
# outlasts the timeout, one thread per rank. mpirun waits the kill timeout twice after a SIGTERM (docs/launch.md),
# so the README's 30 s becomes 10 here, the least that does not warn: a tiny step and its save take well under a
# second, and the run ends ~20 s after the signal instead of ~60.
for ((i = 1; i < ${#words[@]}; ++i)); do
  [[ "${words[i - 1]}" == --mca && "${words[i]}" == odls_base_sigkill_timeout ]] && words[i + 1]=10
done
command=(mpirun "${flags[@]}" "${words[@]:1}" --set "model.path=$model"
  --set "data.path=$fixtures/text/tinyshakespeare.txt" --set train.max_steps=100000 --set train.threads=1)
cd "$src" || fail "cd $src"
# SIGTERM to mpirun alone (what `timeout --foreground`, `kill` and `docker stop` send) once rank 0 has logged a step:
# an event, not a fixed time that 4 ranks on a loaded machine might not start and step within.
"${command[@]}" --set "output.dir=$work/out" >"$work/run.log" 2>&1 </dev/null &
pid=$!
deadline=$((SECONDS + 120))
until grep -Eq 'r0 I\] step [0-9]+/' "$work/run.log"; do
  kill -0 "$pid" 2>/dev/null || { tail -20 "$work/run.log"; fail "the README's mpirun line ended before its first step"; }
  ((SECONDS < deadline)) || { kill -KILL "$pid"; tail -20 "$work/run.log"; fail "no step logged within 120 s"; }
  sleep 0.2
done
kill -TERM "$pid"
wait "$pid"
code=$?
[[ $code -ne 0 ]] || { tail -20 "$work/run.log"; fail "mpirun exited 0 after SIGTERM; the ranks should stop with exit 3"; }
latest=$(cat "$work/out/checkpoints/latest" 2>/dev/null) || { tail -20 "$work/run.log"; fail "no checkpoint after timeout"; }
grep -Eq "SIGTERM received by rank [0-9]+: saved the checkpoint of step [0-9]+ and stopping" "$work/run.log" ||
  { tail -20 "$work/run.log"; fail "no save message naming the signal"; }
grep -q "odls_base_sigkill_timeout" "$work/run.log" && fail "a warning about the kill timeout although it is set"
grep -q "worker(s) idle" "$work/run.log" && fail "the README's line plans fewer stages than workers: $(grep "idle" "$work/run.log")"
echo "ok: SIGTERM to the README's mpirun line after a step -> the ranks saved $latest (mpirun exit $code)"

plain=()
for ((i = 0; i < ${#command[@]}; ++i)); do
  if [[ "${command[i]}" == --mca && "${command[i + 1]}" == odls_base_sigkill_timeout ]]; then
    i=$((i + 2))
    continue
  fi
  plain+=("${command[i]}")
done
"${plain[@]}" --print-config --set "output.dir=$work/plain" >"$work/plain.log" 2>&1 || { tail -20 "$work/plain.log"; fail "the line without the flag failed"; }
[[ $(grep -c "mpirun gives the ranks 1 s after a Ctrl-C or a SIGTERM .*--mca odls_base_sigkill_timeout 30" \
  "$work/plain.log") -eq 1 ]] || { head -30 "$work/plain.log"; fail "no single warning about the kill timeout"; }
echo "ok: without the flag, one warning at start names it"
