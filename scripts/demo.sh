#!/usr/bin/env bash
# The main job on a built-in default: fine-tune the TinyStories-656K checkpoint (shared fixtures) on
# tiny-shakespeare for under a minute on CPU, printing the loss going down and a sample before and after.
# Without the fixtures, train a small byte-level Llama from scratch on Debian's fortunes instead.
# Extra arguments go to roundpipe_train (e.g. --set train.max_steps=100).
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
"$root/scripts/bootstrap.sh"
"$root/scripts/build.sh" --target roundpipe_train
bin="${RP_BUILD_DIR:-$root/build}/src/cli/roundpipe_train"
fixtures="${RP_FIXTURES_DIR:-$root/../shared/fixtures}"
cd "$root"
threads=$(nproc)
if [[ -d "$fixtures/models/tinystories-656k" ]]; then
  exec "$bin" --config configs/tiny-finetune.toml \
    --set "model.path=$fixtures/models/tinystories-656k" \
    --set "data.path=$fixtures/text/tinyshakespeare.txt" \
    --set "train.threads=$threads" "$@"
fi
echo "demo: $fixtures not found; training the built-in tiny model from scratch on fortunes" >&2
exec "$bin" --config configs/builtin-fortunes.toml --set "train.threads=$threads" "$@"
