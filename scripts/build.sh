#!/usr/bin/env bash
# Configures and builds into ${RP_BUILD_DIR:-build} (extra arguments go to `cmake --build`, e.g. --target).
# Ninja where it is installed (scripts/bootstrap.sh installs it); a build directory configured earlier keeps
# its generator.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
build="${RP_BUILD_DIR:-$root/build}"
generator=()
if [[ ! -f "$build/CMakeCache.txt" ]] && command -v ninja >/dev/null; then generator=(-G Ninja); fi
cmake -S "$root" -B "$build" "${generator[@]}" -DRP_WERROR="${RP_WERROR:-ON}" >"$root/.cmake-configure.log" 2>&1 || {
  cat "$root/.cmake-configure.log"
  exit 1
}
cmake --build "$build" -j "${RP_JOBS:-$(nproc)}" "$@"
