#!/usr/bin/env bash
# Host memory of a pipeline run per rank and per node, sampled from /proc every 50 ms while it runs: the
# largest private (anonymous) resident memory of any rank, and the node's total at its peak (every rank's
# private memory + the node store's shared pages, counted once). Model: a randomly initialised 18-layer,
# 768-wide Llama (configs/builtin-tiny's tokenizer), full fine-tune, 2 steps, 2-layer stages.
# Usage: benchmarks/rank_memory.sh [W ...] (default 1 2 4); RP_BUILD_DIR picks the build to measure;
# RP_MEM_DTYPE the model dtype (default float32).
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
bin="${RP_BUILD_DIR:-$root/build}/src/cli/roundpipe_train"
dtype="${RP_MEM_DTYPE:-float32}"
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
python3 - "$root/configs/builtin-tiny/config.json" "$work/config.json" <<'PY'
import json, sys
c = json.load(open(sys.argv[1]))
c.update(hidden_size=768, intermediate_size=2048, num_attention_heads=12, num_key_value_heads=4, num_hidden_layers=18)
json.dump(c, open(sys.argv[2], "w"))
PY
printf 'the quick brown fox jumps over the lazy dog\n%.0s' {1..200} >"$work/data.txt"
launch=(mpirun --bind-to none --oversubscribe)
if [[ $(id -u) -eq 0 ]]; then launch+=(--allow-run-as-root); fi
printf "%-3s %-9s %22s %24s %16s\n" W dtype "max rank private MB" "node total at peak MB" "node store MB"
for w in "${@:-1 2 4}"; do
  for W in $w; do
    RP_NUM_THREADS=1 "${launch[@]}" -np "$W" "$bin" --config /dev/null --set "model.path=$work" \
      --set "model.tokenizer=$root/configs/builtin-tiny" --set model.init=random --set "model.dtype=$dtype" \
      --set "data.path=$work/data.txt" --set train.seq_len=16 --set train.global_batch=4 --set train.microbatches=4 \
      --set train.max_steps=2 --set train.threads=1 --set "pipeline.plan=2,2,2,2,2,2,2,2,2 | 1 | 2,2,2,2,2,2,2,2,2" \
      --set "output.dir=$work/out$W" >"$work/log$W.txt" 2>&1 &
    launcher=$!
    maxRank=0 maxNode=0 maxShm=0
    while kill -0 "$launcher" 2>/dev/null; do
      total=0 shm=0
      for pid in $(pgrep -f "^$bin" || true); do
        read -r anon sh < <(awk '/^RssAnon/{a=$2} /^RssShmem/{s=$2} END{print a+0, s+0}' "/proc/$pid/status" 2>/dev/null || echo "0 0")
        (( anon > maxRank )) && maxRank=$anon
        (( sh > shm )) && shm=$sh
        total=$((total + anon))
      done
      (( shm > maxShm )) && maxShm=$shm
      (( total + shm > maxNode )) && maxNode=$((total + shm))
      sleep 0.05
    done
    wait "$launcher" || { tail -20 "$work/log$W.txt"; exit 1; }
    printf "%-3s %-9s %22.0f %24.0f %16.0f\n" "$W" "$dtype" "$(bc -l <<<"$maxRank/1000")" "$(bc -l <<<"$maxNode/1000")" "$(bc -l <<<"$maxShm/1000")"
  done
done
