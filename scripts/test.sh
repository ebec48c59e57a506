#!/usr/bin/env bash
# The test command: installs what is missing, builds, runs every test tier through CTest
# (labels unit, mpi, golden, gpu, cluster, fuzz). Exit code = result. Extra arguments go to ctest (e.g. -L unit).
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
"$root/scripts/bootstrap.sh"
"$root/scripts/build.sh"
cd "${RP_BUILD_DIR:-$root/build}"
ctest --output-on-failure --no-tests=error "$@"
