#!/usr/bin/env bash
# launch/roundpipe-mpirun shows the log as it is written (docs/launch.md): its stderr filter passes each line the
# moment it arrives. Two ranks train 10 steps against a slow emulated GPU (~0.4 s a step, the host idle) under the
# launcher in a pseudo-terminal, as a user's terminal runs it; each step line's arrival on the terminal, less the
# time the line itself states, is the same for every step within 1 s (a filter holding lines back — mawk reads a
# pipe in blocks — delivered them all at the end: the first step's lag was the run's length).
# Usage: launcher_live_log.sh <source dir> <roundpipe_train> [mpirun flags...]
set -euo pipefail
src="$1" train="$2"
shift 2
flags=("$@")
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
fail() { echo "FAIL: $*"; exit 1; }
[[ -d /usr/share/games/fortunes ]] || fail "/usr/share/games/fortunes is missing (scripts/bootstrap.sh installs fortunes)"
source "$src/tests/support/slow_gpu.sh"
slow_gpu_profile "$work/slow.toml" 0.01 400.0
command=("$src/launch/roundpipe-mpirun" -np 2 --bind-to none "${flags[@]}" "$train"
  --config "$src/configs/builtin-fortunes.toml" --set pipeline.backend=emulated
  --set pipeline.emulated_profile="$work/slow.toml" --set train.max_steps=10 --set output.log_every=1
  --set optim.threads=1 --set output.sample_prompt= --set checkpoint.at_end=false --set output.dir="$work/run")
cd "$src"
RP_NUM_THREADS=1 python3 - "${command[@]}" <<'PY' || fail "the launcher held the log back"
import os, pty, re, select, subprocess, sys, time

master, slave = pty.openpty()
start = time.monotonic()
proc = subprocess.Popen(sys.argv[1:], stdin=slave, stdout=slave, stderr=slave, close_fds=True)
os.close(slave)
pending, lines = b"", []
while True:
    ready, _, _ = select.select([master], [], [], 1.0)
    if not ready:
        if proc.poll() is not None:
            break
        continue
    try:
        data = os.read(master, 65536)
    except OSError:  # the terminal's last writer has gone
        break
    if not data:
        break
    now = time.monotonic() - start
    pending += data
    while b"\n" in pending:
        line, pending = pending.split(b"\n", 1)
        lines.append((now, line.decode(errors="replace").rstrip("\r")))
code = proc.wait()
steps = [(now, float(m.group(1)), int(m.group(2))) for now, text in lines
         if (m := re.match(r"\[\s*([\d.]+) r0 I\] step (\d+)/10 ", text))]
if code != 0 or len(steps) != 10:
    print("\n".join(text for _, text in lines))
    sys.exit(f"exit {code}, {len(steps)} step lines of 10")
lags = [now - stamp for now, stamp, _ in steps]
span = steps[-1][1] - steps[0][1]
for (now, stamp, step), lag in zip(steps, lags):
    print(f"step {step}: written at {stamp:.2f} s, on the terminal at {now:.2f} s after launch (lag {lag:.2f} s)")
assert span >= 2.0, f"the steps took {span:.2f} s: too short to tell a held log from a live one"
assert max(lags) - min(lags) < 1.0, f"lags from {min(lags):.2f} to {max(lags):.2f} s: lines held back"
PY
echo "PASS"
