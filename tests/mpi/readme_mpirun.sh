#!/usr/bin/env bash
# The README's multi-worker lines as a user types them (docs/launch.md, "Signals"):
#  1. every README line that runs several workers goes through launch/roundpipe-mpirun, none through a bare mpirun;
#  2. its tiny-finetune line with a typo'd key returns within 10 s of starting, exit 2, naming the key, a rank's
#     own error line the last the user reads (no Open MPI banner after it);
#  3. the same line stopped by SIGTERM to the launcher once a step's metrics are written (what `timeout`, `kill` and
#     `docker stop` send) leaves a checkpoint of the last step and returns with exit 3 within 10 s of the signal;
#  4. a Ctrl-C (SIGINT to the launcher's whole foreground process group, as a terminal sends it) does the same,
#     and so does SIGINT to a launcher started in the background of a script (where SIGINT starts ignored);
#  5. the line as a plain `mpirun` (no launcher, no kill timeout) logs one warning at start naming the launcher;
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

bare=$(grep -E '^mpirun ' "$src/README.md")
[[ -z "$bare" ]] || fail "README lines run a bare mpirun (Ctrl-C would not save, errors would wait): $bare"
lines=$(grep -E '^launch/roundpipe-mpirun ' "$src/README.md")
[[ -n "$lines" ]] || fail "the README has no launch/roundpipe-mpirun line"
echo "ok: the README's $(wc -l <<<"$lines") multi-worker lines go through launch/roundpipe-mpirun"

line=$(grep -E -- '--config configs/tiny-finetune.toml' <<<"$lines" | head -1)
[[ -n "$line" ]] || fail "no README launch/roundpipe-mpirun line for configs/tiny-finetune.toml"
line="${line%%#*}"  # the comment
read -r -a words <<<"${line//build\/src\/cli\/roundpipe_train/$train}"
[[ " ${words[*]} " == *" $train "* ]] || fail "the README line names no build/src/cli/roundpipe_train: $line"
# The README's own command; the flags the README asks for as root; the fixtures where they are here, a run that
# outlasts the test, one thread per rank.
command=("$src/${words[0]}" "${flags[@]}" "${words[@]:1}" --set "model.path=$model"
  --set "data.path=$fixtures/text/tinyshakespeare.txt" --set train.max_steps=100000 --set train.threads=1)
cd "$src" || fail "cd $src"

# 2. A typo'd key: back within 10 s, exit 2, the rank's message last.
t0=$SECONDS
"${command[@]}" --set train.max_stepz=5 --set "output.dir=$work/typo" >"$work/typo.log" 2>&1
code=$? took=$((SECONDS - t0))
[[ $code -eq 2 ]] || { tail -20 "$work/typo.log"; fail "a typo'd key under the README's line exited $code, expected 2"; }
((took < 10)) || { tail -20 "$work/typo.log"; fail "a typo'd key took $took s to return (at most 10)"; }
last=$(grep -v '^\s*$' "$work/typo.log" | tail -1)
[[ "$last" =~ ^\[\ *[0-9.]+\ r[0-9]+\ E\] ]] || { cat "$work/typo.log"; fail "the last line is not a rank's own: $last"; }
grep -q "unknown key 'train.max_stepz'" "$work/typo.log" || { cat "$work/typo.log"; fail "no rank named the key"; }
grep -q "has been aborted\|exited with non-zero status" "$work/typo.log" && fail "Open MPI's banner is shown: $(cat "$work/typo.log")"
echo "ok: a typo'd key returns in $took s with exit 2, the rank's message last: $last"

# 3 and 4. Started as from a terminal (a session of its own, so SIGINT is not ignored as it is for a background job
# of a script); the signal once metrics.jsonl has a step; the exit code, the time to return, the checkpoint.
stop() {  # stop <name> <TERM|INT-to-group>
  python3 - "$work/$1" "$2" "${command[@]}" --set "output.dir=$work/$1" <<'PY'
import os, signal, subprocess, sys, time
out, how, command = sys.argv[1], sys.argv[2], sys.argv[3:]
log = open(out + ".log", "w")
if how == "INT-background":  # the launcher as a background job of a script: started with SIGINT ignored
    command = ["bash", "-c", '"$@" & echo $! >"$0"; wait $!', out + ".pid"] + command
p = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, start_new_session=True)
deadline = time.time() + 120
while not (os.path.exists(out + "/metrics.jsonl") and os.path.getsize(out + "/metrics.jsonl") > 0):  # a step done
    if p.poll() is not None: sys.exit(f"the run ended before its first step (exit {p.returncode})")
    if time.time() > deadline: p.kill(); sys.exit("no step logged within 120 s")
    time.sleep(0.2)
t0 = time.time()
if how == "TERM": p.send_signal(signal.SIGTERM)      # timeout, kill, docker stop: the launcher alone
elif how == "INT": os.killpg(p.pid, signal.SIGINT)    # Ctrl-C: the terminal's whole foreground group
else: os.kill(int(open(out + ".pid").read()), signal.SIGINT)  # kill -INT to the background launcher
try:
    code = p.wait(timeout=120)
except subprocess.TimeoutExpired:  # the signal was dropped: end the job (mpirun has a session of its own)
    subprocess.run(["pkill", "-9", "-f", f"output.dir={out}"])
    sys.exit("no exit within 120 s of the signal")
print(code, round(time.time() - t0, 1))
PY
}
for case in "sigterm TERM" "ctrl_c INT" "background INT-background"; do
  read -r name how <<<"$case"
  result=$(stop "$name" "$how") || { tail -20 "$work/$name.log"; fail "$name: $result"; }
  read -r code took <<<"$result"
  [[ $code -eq 3 ]] || { tail -20 "$work/$name.log"; fail "$name: the README's line exited $code, expected 3"; }
  python3 -c "import sys; sys.exit(float(sys.argv[1]) >= 10)" "$took" || { tail -20 "$work/$name.log"; fail "$name: $took s to return"; }
  latest=$(cat "$work/$name/checkpoints/latest" 2>/dev/null) || { tail -20 "$work/$name.log"; fail "$name: no checkpoint"; }
  grep -Eq "SIGUSR1 received by rank [0-9]+: saved the checkpoint of step [0-9]+ and stopping" "$work/$name.log" ||
    { tail -20 "$work/$name.log"; fail "$name: no save message"; }
  grep -q "worker(s) idle" "$work/$name.log" && fail "the README's line plans fewer stages than workers: $(grep "idle" "$work/$name.log")"
  echo "ok: $how to the README's line after a step -> the ranks saved $latest, exit 3 in $took s"
  [[ $name == sigterm ]] && latest_sigterm=$latest
done

# The same line again into the stopped run's directory, without --resume: refused at once, exit 2, before any rank
# loads the model or the data (no "pipeline:" plan line, no "dataset:" line), the checkpoint untouched.
t0=$SECONDS
"${command[@]}" --set "output.dir=$work/sigterm" >"$work/again.log" 2>&1
code=$? took=$((SECONDS - t0))
[[ $code -eq 2 ]] || { tail -20 "$work/again.log"; fail "a run into a stopped run's checkpoints exited $code, expected 2"; }
grep -q "already holds checkpoints of an earlier run" "$work/again.log" || { cat "$work/again.log"; fail "no refusal"; }
grep -q "pipeline: \|dataset: " "$work/again.log" && { cat "$work/again.log"; fail "refused only after the model and data loaded"; }
[[ "$(cat "$work/sigterm/checkpoints/latest")" == "$latest_sigterm" ]] || fail "the refused run moved checkpoints/latest"
echo "ok: the same line into the stopped run's directory is refused in $took s, before the model loads"

# 5. The same line as a plain mpirun without the kill timeout: one warning at start naming the launcher.
plain=(mpirun "${command[@]:1}")
"${plain[@]}" --print-config --set "output.dir=$work/plain" >"$work/plain.log" 2>&1 || { tail -20 "$work/plain.log"; fail "the line as a plain mpirun failed"; }
[[ $(grep -c "mpirun gives the ranks 1 s after a Ctrl-C or a SIGTERM .*launch/roundpipe-mpirun" \
  "$work/plain.log") -eq 1 ]] || { head -30 "$work/plain.log"; fail "no single warning about the kill timeout"; }
grep -q "mpirun gives the ranks" "$work/sigterm.log" && fail "a warning about the kill timeout under the launcher"
echo "ok: as a plain mpirun, one warning at start names the launcher"
