#!/usr/bin/env bash
# The main job on a built-in default: load the TinyStories-656K checkpoint from the shared fixtures,
# print a greedy continuation and the loss on a text. Without the fixtures it runs a built-in random
# tiny model instead (so the path is exercised; the output is noise).
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
"$root/scripts/bootstrap.sh"
"$root/scripts/build.sh" --target roundpipe_generate
bin="${RP_BUILD_DIR:-$root/build}/src/cli/roundpipe_generate"
fixtures="${RP_FIXTURES_DIR:-$root/../shared/fixtures}"
model="$fixtures/models/tinystories-656k"
if [[ -d "$model" ]]; then
  exec "$bin" --model "$model" --prompt "Once upon a time" --max-new-tokens 80 \
    --loss-text "$fixtures/text/tinystories_sample.txt" "$@"
fi
echo "demo: $model not found; running the built-in random tiny model" >&2
exec "$bin" "$@"
