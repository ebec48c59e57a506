#!/usr/bin/env bash
# Failure paths with real processes: a rank killed with SIGKILL mid-step, a rank that throws, and a rank
# that hangs (the stall inspector's case: a warning after 1 s, the abort after 3 s) must make the whole job exit non-zero
# within 30 s with a message naming the rank, and leave no shared-memory segment behind. Usage: kill_rank.sh <roundpipe_train> <fixtures dir> <mpiexec> [mpiexec flags...]
# RP_TEST_SETS: more space-separated key=value settings for every run (the GPU tier: pipeline.backend=cuda).
set -uo pipefail
train="$1"; fixtures="${RP_FIXTURES_DIR:-$2}"; shift 2  # RP_FIXTURES_DIR: a copy carried to a GPU machine
model="$fixtures/models/tinystories-656k"
if [[ ! -d "$model" ]]; then
  # The GPU tier on a GPU machine (RP_REQUIRE_FIXTURES=1): a missing fixture fails, a pass must test something.
  if [[ "${RP_REQUIRE_FIXTURES:-0}" == 1 ]]; then echo "FAIL: $model not found and RP_REQUIRE_FIXTURES=1"; exit 1; fi
  echo "SKIP: $model not found"; exit 77
fi
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
# Shared-memory segments are named /roundpipe-<creator pid>-<tag>: a leak of this test's runs is a segment that
# was not there before and whose creator is gone (another suite's live run keeps its creator alive).
before=$(ls /dev/shm | grep '^roundpipe-' || true)
leaked() {
  local f name pid
  for f in /dev/shm/roundpipe-*; do
    [[ -e $f ]] || continue
    name="${f##*/}"
    grep -qxF "$name" <<<"$before" && continue
    pid=$(cut -d- -f2 <<<"$name")
    kill -0 "$pid" 2>/dev/null && continue
    echo "$name"
  done
}
extra=()
for kv in ${RP_TEST_SETS:-}; do extra+=(--set "$kv"); done

for fault in kill:1:2 throw:2:1 hang:1:2; do
  start=$(date +%s)
  RP_FAULT_INJECT="$fault" RP_NUM_THREADS=1 timeout 60 "$@" -n 3 "$train" --config /dev/null \
    --set "model.path=$model" --set "data.path=$fixtures/text/tinyshakespeare.txt" \
    --set train.seq_len=32 --set train.global_batch=6 --set train.microbatches=3 --set train.max_steps=5 \
    --set "output.dir=$work/out" --set pipeline.stall_timeout_s=3 --set pipeline.stall_warn_s=1 "${extra[@]}" >"$work/out.txt" 2>&1
  code=$?
  elapsed=$(( $(date +%s) - start ))
  if [[ $code -eq 0 ]]; then echo "FAIL ($fault): the job exited 0"; cat "$work/out.txt"; exit 1; fi
  if [[ $code -eq 124 || $elapsed -gt 30 ]]; then echo "FAIL ($fault): took ${elapsed}s (code $code)"; cat "$work/out.txt"; exit 1; fi
  rank=$(cut -d: -f2 <<<"$fault")
  if [[ "$fault" == throw:* ]] && ! grep -q "fault injection: rank $rank fails at step" "$work/out.txt"; then
    echo "FAIL ($fault): the original message is missing"; cat "$work/out.txt"; exit 1
  fi
  # Named by someone other than the failed rank itself: another rank's log line ("[ t r0 W] ... rank 1 ...")
  # or the launcher's summary; a thrown error by its own final line and the launcher's exit code box.
  others="r[^$rank ]"
  case "$fault" in
    kill:*) named="^\[ *[0-9.]+ $others [WE]\] .*rank $rank\b|mpirun noticed that process rank $rank " ;;
    throw:*) named="r$rank E\] rank $rank failed; ending the job of 3 ranks \(exit code 1\)" ;;
    hang:*) named="^\[ *[0-9.]+ $others E\] stalled: waited [0-9]+ s for rank $rank " ;;
  esac
  if ! grep -Eq "$named" "$work/out.txt"; then echo "FAIL ($fault): no message names rank $rank ($named)"; cat "$work/out.txt"; exit 1; fi
  if [[ "$fault" == throw:* ]] && ! grep -Eq "Exit code: +1" "$work/out.txt"; then
    echo "FAIL ($fault): the launcher does not report the failed rank's exit code"; cat "$work/out.txt"; exit 1
  fi
  if grep -q "ORTE_ERROR_LOG" "$work/out.txt"; then echo "FAIL ($fault): Open MPI's error noise"; cat "$work/out.txt"; exit 1; fi
  if [[ "$fault" == hang:* ]]; then
    # The report names the configured timeout, the job ended no sooner than it, and the 1 s warning came first.
    waited=$(grep -Eo "stalled: waited [0-9]+ s" "$work/out.txt" | head -1 | grep -Eo "[0-9]+")
    [[ $waited == 3 ]] || { echo "FAIL ($fault): the stall report says '${waited:-nothing}' s, expected 3"; cat "$work/out.txt"; exit 1; }
    ((elapsed >= 3)) || { echo "FAIL ($fault): ended after ${elapsed}s, before the 3 s stall timeout"; cat "$work/out.txt"; exit 1; }
    warn_at=$(grep -n "still waiting after 1 s" "$work/out.txt" | head -1 | cut -d: -f1)
    stall_at=$(grep -n "stalled: waited" "$work/out.txt" | head -1 | cut -d: -f1)
    ((${warn_at:-999999} < stall_at)) || { echo "FAIL ($fault): the stall warning did not come before the abort"; cat "$work/out.txt"; exit 1; }
  fi
  if [[ "$fault" == hang:* ]] && ! grep -q "W\] still waiting after 1 s for .*; the job aborts at 3 s" "$work/out.txt"; then
    echo "FAIL ($fault): no stall warning before the abort"; cat "$work/out.txt"; exit 1
  fi
  if [[ "$fault" == hang:* ]] && ! grep -q "rank $rank: worker: starting step" "$work/out.txt"; then
    echo "FAIL ($fault): the stall report does not give rank $rank's last operation"; cat "$work/out.txt"; exit 1
  fi
  echo "ok ($fault): exit code $code after ${elapsed}s"
done
# A rank whose process stops running (kill -STOP: a debugger, a suspended job) is named by another rank's stall
# report as the rank that stopped (Note [Heartbeats]); before, each rank named the rank it waited for, itself waiting.
RP_NUM_THREADS=1 timeout 60 "$@" -n 3 "$train" --config /dev/null \
  --set "model.path=$model" --set "data.path=$fixtures/text/tinyshakespeare.txt" \
  --set train.seq_len=32 --set train.global_batch=6 --set train.microbatches=3 --set train.max_steps=100000 \
  --set "output.dir=$work/stopped" --set pipeline.stall_timeout_s=4 --set pipeline.stall_warn_s=1 "${extra[@]}" \
  >"$work/stop.txt" 2>&1 &
job=$!
stopped=""
for _ in $(seq 1 300); do  # until rank 1 trains (a step line in metrics.jsonl), then stop its process
  if [[ -s "$work/stopped/metrics.jsonl" ]]; then
    for p in $(pgrep -f -- "$train" || true); do
      if tr '\0' '\n' <"/proc/$p/environ" 2>/dev/null | grep -qxE "(OMPI_COMM_WORLD_RANK|PMI_RANK)=1"; then
        kill -STOP "$p" && stopped=$p
      fi
    done
    [[ -n "$stopped" ]] && break
  fi
  sleep 0.1
done
[[ -n "$stopped" ]] || { kill "$job"; echo "FAIL (stop): rank 1 never trained or was not found"; cat "$work/stop.txt"; exit 1; }
start=$(date +%s)
wait "$job"
code=$?
elapsed=$(( $(date +%s) - start ))
kill -CONT "$stopped" 2>/dev/null; kill -KILL "$stopped" 2>/dev/null
if [[ $code -eq 0 || $code -eq 124 || $elapsed -gt 30 ]]; then
  echo "FAIL (stop): exit code $code after ${elapsed}s"; cat "$work/stop.txt"; exit 1
fi
if ! grep -Eq "^  rank 1 has not run for [0-9.]+ s \(its heartbeat stopped" "$work/stop.txt"; then
  echo "FAIL (stop): no stall report says rank 1 stopped running"; cat "$work/stop.txt"; exit 1
fi
echo "ok (stop): the stall report names the stopped rank 1, exit code $code after ${elapsed}s"

left=$(leaked)
if [[ -n $left ]]; then echo "FAIL: shared-memory segments leaked: $left"; exit 1; fi
echo "ok: no /dev/shm segment left"
