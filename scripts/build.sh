#!/usr/bin/env bash
# Configures and builds into ${RP_BUILD_DIR:-build} (extra arguments go to `cmake --build`, e.g. --target).
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
build="${RP_BUILD_DIR:-$root/build}"
cmake -S "$root" -B "$build" -DRP_WERROR="${RP_WERROR:-ON}" >"$root/.cmake-configure.log" 2>&1 || {
  cat "$root/.cmake-configure.log"
  exit 1
}
cmake --build "$build" -j "${RP_JOBS:-2}" "$@"
