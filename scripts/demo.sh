#!/usr/bin/env bash
# The main job on a built-in default: RoundPipe pipeline training with 2 worker processes under mpirun —
# fine-tune the TinyStories-656K checkpoint (shared fixtures) on tiny-shakespeare (on the GPUs where there are
# any, else on CPU), printing the plan,
# the loss going down and a sample before and after. Without the fixtures, train a small byte-level Llama
# from scratch on Debian's fortunes instead. Extra arguments go to roundpipe_train
# (e.g. --set train.max_steps=100); RP_DEMO_WORKERS sets the number of worker processes (default 2), RP_DEMO_OUT
# the output directory (default out/<config name>). The run's last checkpoint is exported as a Hugging Face
# model directory (<output dir>/hf).
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
"$root/scripts/bootstrap.sh"
"$root/scripts/build.sh" --target roundpipe_train roundpipe_export
bin="${RP_BUILD_DIR:-$root/build}/src/cli/roundpipe_train"
export_bin="${RP_BUILD_DIR:-$root/build}/src/cli/roundpipe_export"
fixtures="${RP_FIXTURES_DIR:-$root/../shared/fixtures}"
workers="${RP_DEMO_WORKERS:-2}"
cd "$root"

# One compute thread per worker process; as root Open MPI needs explicit permission.
# Ctrl-C: launch/roundpipe-mpirun asks the ranks to save and stop (docs/launch.md, "Signals").
launch=("$root/launch/roundpipe-mpirun" -np "$workers" --bind-to none)
if [[ $(id -u) -eq 0 ]]; then launch+=(--allow-run-as-root); fi
if (( workers > $(nproc) )); then launch+=(--oversubscribe); fi
common=(--set train.threads=1 --set "train.microbatches=$((workers + 2))" --set "train.global_batch=$((4 * (workers + 2)))")
# Where there are GPUs but fewer than workers (a one-GPU box), the workers share them (docs/gpu.md).
gpus=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU ' || true)
if (( gpus > 0 && gpus < workers )); then common+=(--set "pipeline.ranks_per_gpu=$(( (workers + gpus - 1) / gpus ))"); fi

if [[ -d "$fixtures/models/tinystories-656k" ]]; then
  config=configs/tiny-finetune.toml out="${RP_DEMO_OUT:-out/tiny-finetune}"
  rm -rf "$out"  # the demo's own output: each demo run starts over
  "${launch[@]}" "$bin" --config "$config" --set "model.path=$fixtures/models/tinystories-656k" \
    --set "data.path=$fixtures/text/tinyshakespeare.txt" --set "output.dir=$out" "${common[@]}" "$@"
else
  echo "demo: $fixtures not found; training the built-in tiny model from scratch on fortunes" >&2
  config=configs/builtin-fortunes.toml out="${RP_DEMO_OUT:-out/builtin-fortunes}"
  rm -rf "$out"
  "${launch[@]}" "$bin" --config "$config" --set "output.dir=$out" "${common[@]}" "$@"
fi
# The run's last checkpoint as a Hugging Face model directory (transformers / vLLM load it).
"$export_bin" --checkpoint "$out/checkpoints" --output "$out/hf"
echo "demo: the fine-tuned model is in $out/hf (config.json, model.safetensors, tokenizer.json)"
