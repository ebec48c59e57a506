#!/usr/bin/env bash
# Sync's update by layer (docs/benchmarks.md, "The update by layer"; Note [Update by layer]): a sync step
# publishes each layer's new weights as soon as that layer is updated, so the next iteration's first stages
# start before the whole update is done. Measured on an optimizer-heavy model (TinyStories' shape widened:
# hidden 256, 16 layers, an untied 8192-token vocabulary, 17.8M parameters, random weights, float32), 2
# worker processes, one 4-token row per microbatch, 2 microbatches, optim.threads = 1, for two plans: seven
# stages ("5,4,4 | 4 | 4,4,5") and one fused stage with everything but the embedding ("1 | 16 | 1", where the
# next iteration's fused job waits for every layer). Prints the mean step time of steps 4..14, the time the
# jobs wait for their weights to be published (the trace's "wait: weights published" spans, both ranks, per
# step) and the upload they wait for once the weights are published (Note [Upload as published]: the trace's
# `upload` spans, a prefetched job's wait for its ticket included), medians of RP_BENCH_REPEATS runs (default
# 3), for sync and async, for each build in
# RP_BENCH_BUILDS (default: build; name an older build to compare with it). RP_ADAMW_KERNEL=scalar
# (docs/env.md) stands in for a weak host.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
fixtures="${RP_FIXTURES_DIR:-$root/../shared/fixtures}"
repeats="${RP_BENCH_REPEATS:-3}"
read -r -a builds <<<"${RP_BENCH_BUILDS:-$root/build}"
out="$(mktemp -d)"
trap 'rm -rf "$out"' EXIT
launch=(mpirun --bind-to none -np 2)
if [[ $(id -u) -eq 0 ]]; then launch+=(--allow-run-as-root); fi
[[ -n "${RP_ADAMW_KERNEL:-}" ]] && launch+=(-x RP_ADAMW_KERNEL)
model="$out/model"
mkdir -p "$model"
python3 - "$fixtures/models/tinystories-656k/config.json" "$model/config.json" <<'PY'
import json, sys
c = json.load(open(sys.argv[1]))
c.update(hidden_size=256, intermediate_size=768, num_hidden_layers=16, vocab_size=8192, tie_word_embeddings=False)
json.dump(c, open(sys.argv[2], "w"))
PY
echo "2 workers, 17.8M-parameter untied model, 2 microbatches of 4 tokens, optim.threads = 1, AdamW kernel"
echo "${RP_ADAMW_KERNEL:-the fastest}; mean step of steps 4..14, median of $repeats runs (the runs in parentheses)"
echo
echo "| build | plan | mode | step ms | publication waited, ms per step | upload waited, ms per step |"
echo "|---|---|---|---:|---:|---:|"
# Runs of the builds alternate, so that the machine's drift (±10% over minutes here) falls on all of them alike.
for plan in "5,4,4 | 4 | 4,4,5" "1 | 16 | 1"; do
  for mode in sync async; do
    declare -A times=() uploads=() published=()
    for ((i = 0; i < repeats; ++i)); do
      for build in "${builds[@]}"; do
        dir="$out/run"
        rm -rf "$dir"
        "${launch[@]}" "$build/src/cli/roundpipe_train" --config /dev/null --set "model.path=$model" \
          --set model.init=random --set "model.tokenizer=$fixtures/models/tinystories-656k" \
          --set "data.path=$fixtures/text/tinyshakespeare.txt" --set train.seq_len=4 --set train.global_batch=2 \
          --set train.microbatches=2 --set train.max_steps=14 --set train.threads=1 --set optim.threads=1 \
          --set optim.schedule=constant --set "optim.mode=$mode" --set "pipeline.plan=$plan" \
          --set pipeline.replan_every=0 --set output.sample_prompt= --set "output.dir=$dir" \
          --set output.log_every=1000 >"$dir.log" 2>&1 || { tail -5 "$dir.log"; exit 1; }
        read -r step upload publish < <(python3 - "$dir" <<'PY'
import json, os, statistics, sys
rows = [json.loads(l) for l in open(os.path.join(sys.argv[1], "metrics.jsonl"))]
events = [e for e in json.load(open(os.path.join(sys.argv[1], "trace.json")))["traceEvents"] if e.get("ph") == "X"]
upload = sum(e["dur"] for e in events if e.get("cat") == "upload") / 1e3 / len(rows)
publish = sum(e["dur"] for e in events if e.get("name") == "wait: weights published") / 1e3 / len(rows)
print(f"{1000 * statistics.mean(r['step_time_s'] for r in rows[3:]):.0f} {upload:.1f} {publish:.1f}")
PY
)
        times[$build]+="$step "
        uploads[$build]+="$upload "
        published[$build]+="$publish "
      done
    done
    for build in "${builds[@]}"; do
      read -r -a runs <<<"${times[$build]}"
      read -r -a waited <<<"${uploads[$build]}"
      read -r -a publishing <<<"${published[$build]}"
      sorted=($(printf '%s\n' "${runs[@]}" | sort -n))
      sortedUp=($(printf '%s\n' "${waited[@]}" | sort -n))
      sortedPub=($(printf '%s\n' "${publishing[@]}" | sort -n))
      echo "| $(basename "$(dirname "$build")")/$(basename "$build") | ${plan//|/\\|} | $mode |" \
        "${sorted[$((repeats / 2))]} (${runs[*]}) | ${sortedPub[$((repeats / 2))]} (${publishing[*]}) |" \
        "${sortedUp[$((repeats / 2))]} (${waited[*]}) |"
    done
  done
done
