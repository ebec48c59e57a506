#!/usr/bin/env bash
# The GPU tier on the machine it runs on: builds roundpipe against this machine's PyTorch (any CUDA-enabled
# torch >= 2.6, from RP_PYTHON or the python3 on PATH) for this machine's GPU architecture, runs `ctest -L gpu`
# and the GPU benchmarks, and writes the results under $OUT (or out/gpu-check). Where the system lacks Open MPI, HDF5 or the other
# Debian dependencies, it unpacks the archive scripts/offline-bundle.sh made (RP_OFFLINE_BUNDLE, default
# offline/roundpipe-deps.tar.gz) under a prefix and builds against that (docs/building.md). Without a GPU it is
# a dry run: everything builds and the GPU tests skip themselves. Exit code = ctest's (1 if a benchmark failed).
# RP_USE_BUNDLE=1 uses the archive even where the system has the packages (to test the archive).
# RP_GPU_PARTS: what runs after the build, any of "tests throughput peer" [all three]. RP_GPU_TARGETS: what is
# built ["gpu": the GPU tier's programs and roundpipe_train; "all": everything].
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
python="${RP_PYTHON:-$(command -v python3 || true)}"
build="${RP_BUILD_DIR:-$root/build-gpu}"
out="${OUT:-$root/out/gpu-check}"
bundle="${RP_OFFLINE_BUNDLE:-$root/offline/roundpipe-deps.tar.gz}"
prefix="${RP_DEPS_PREFIX:-$root/offline/prefix}"
say() { echo "gpu-check: $*"; }
mkdir -p "$out"

# PyTorch: LibTorch for the build, and what it says about the GPUs.
[[ -n "$python" ]] || { say "no python3 on PATH; set RP_PYTHON to a Python with a CUDA-enabled torch"; exit 1; }
if ! "$python" - >"$out/torch.txt" 2>&1 <<'PY'; then
import sys
import torch
major, minor = (int(x) for x in torch.__version__.split("+")[0].split(".")[:2])
print(f"torch {torch.__version__} (CUDA {torch.version.cuda}) from {torch.__file__}")
if torch.version.cuda is None or (major, minor) < (2, 6):
    print("needs a CUDA-enabled torch >= 2.6")
    sys.exit(1)
n = torch.cuda.device_count() if torch.cuda.is_available() else 0
print(f"{n} usable CUDA device(s)" + "".join(f"\n  cuda:{i} {torch.cuda.get_device_name(i)}" for i in range(n)))
PY
  cat "$out/torch.txt"; say "$python cannot supply LibTorch (set RP_PYTHON)"; exit 1
fi
cat "$out/torch.txt"

# The Debian dependencies: the system's, or the offline archive's under $prefix.
have_system_deps() {
  command -v mpicxx >/dev/null && command -v mpirun >/dev/null || return 1
  local h
  for h in hdf5/serial/H5Cpp.h fmt/format.h CLI/CLI.hpp toml++/toml.hpp nlohmann/json.hpp gtest/gtest.h \
           gmock/gmock.h benchmark/benchmark.h unicode/normalizer2.h zlib.h; do
    [[ -e /usr/include/$h || -e /usr/local/include/$h ]] || { say "the system lacks $h"; return 1; }
  done
}
cmake_args=()
if [[ "${RP_USE_BUNDLE:-0}" == 1 ]] || ! have_system_deps; then
  [[ -f "$bundle" ]] || { say "missing dependencies and no $bundle: run scripts/offline-bundle.sh on a connected machine of the same distribution family and copy its archive here"; exit 1; }
  arch="$(dpkg --print-architecture 2>/dev/null | sed 's/amd64/x86_64/;s/arm64/aarch64/')-linux-gnu"
  lib="$prefix/usr/lib/$arch"
  if [[ ! -f "$prefix/.unpacked" || "$bundle" -nt "$prefix/.unpacked" ]]; then
    say "unpacking $bundle under $prefix"
    rm -rf "$prefix"; mkdir -p "$prefix/debs"
    tar -C "$prefix/debs" -xzf "$bundle"
    for deb in "$prefix"/debs/*.deb; do dpkg-deb -x "$deb" "$prefix"; done
    # Relocate what hard-codes /usr: HDF5's compiler wrappers; Open MPI's finds itself through OPAL_PREFIX.
    sed -i "s|^prefix=\"/usr\"|prefix=\"$prefix/usr\"|" "$prefix"/usr/bin/h5cc "$prefix"/usr/bin/h5c++
    for tool in mpirun mpiexec mpicc mpicxx mpic++; do ln -sf "$tool.openmpi" "$prefix/usr/bin/$tool"; done
    # The archive's libcurl (HDF5 links it for its ros3 driver) needs Debian 12's LDAP and libssh2, which other
    # distributions name differently: where the system has a libcurl.so.4 of its own, HDF5 gets that one.
    syscurl="$(ldconfig -p 2>/dev/null | awk '$1 == "libcurl.so.4" {print $NF; exit}')"
    if [[ -n "$syscurl" ]]; then
      for so in "$lib"/libcurl.so*; do ln -sf "$syscurl" "$so"; done
      say "HDF5 uses the system's $syscurl"
    fi
    touch "$prefix/.unpacked"
    rm -f "$build/CMakeCache.txt"  # found paths from an earlier prefix are stale
  fi
  export PATH="$prefix/usr/bin:$PATH"
  export LD_LIBRARY_PATH="$lib:$lib/openmpi/lib:$lib/hdf5/serial${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
  export OPAL_PREFIX="$prefix/usr"
  export CMAKE_PREFIX_PATH="$prefix/usr${CMAKE_PREFIX_PATH:+:$CMAKE_PREFIX_PATH}"
  export PKG_CONFIG_PATH="$lib/pkgconfig${PKG_CONFIG_PATH:+:$PKG_CONFIG_PATH}"
  cmake_args+=(-DMPI_C_COMPILER="$prefix/usr/bin/mpicc" -DMPI_CXX_COMPILER="$prefix/usr/bin/mpicxx"
               -DMPIEXEC_EXECUTABLE="$prefix/usr/bin/mpiexec" -DHDF5_C_COMPILER_EXECUTABLE="$prefix/usr/bin/h5cc"
               -DHDF5_CXX_COMPILER_EXECUTABLE="$prefix/usr/bin/h5c++")
  say "dependencies from the offline archive ($(wc -l <"$prefix/debs/MANIFEST") lines of MANIFEST)"
else
  say "dependencies from the system"
fi

# This machine's GPU architecture (all of ours where there is no GPU: a dry run).
archs="$(nvidia-smi --query-gpu=compute_cap --format=csv,noheader 2>/dev/null | tr -d . | sort -u | paste -sd';' || true)"
archs="${archs:-75;80;86;89;90}"
say "building in $build for CUDA architectures $archs"
cmake -S "$root" -B "$build" -DRP_PYTHON="$python" -DRP_CUDA_ARCHITECTURES="$archs" -DRP_WERROR=OFF \
  "${cmake_args[@]}" >"$out/configure.log" 2>&1 || { cat "$out/configure.log"; exit 1; }
if [[ -n "${OPAL_PREFIX:-}" ]]; then  # with the archive: what the build still takes from the system (base libraries only)
  grep -E '^(HDF5|MPI)_.*LIBRARY.*:FILEPATH=/' "$build/CMakeCache.txt" | grep -v "=$prefix" | sed 's/^/gpu-check: from the system: /' || true
fi
targets=()
if [[ "${RP_GPU_TARGETS:-gpu}" == gpu ]]; then
  targets=(--target test_gpu_device test_cuda_worker test_cuda_marks test_gpu_pipeline test_pipeline roundpipe_train)
fi
say "building ${RP_GPU_TARGETS:-gpu} targets"
cmake --build "$build" -j "${RP_JOBS:-$(nproc)}" "${targets[@]}" >"$out/build.log" 2>&1 \
  || { tail -50 "$out/build.log"; exit 1; }
parts=" ${RP_GPU_PARTS:-tests throughput peer} "
rc=0

# The fixtures: ../shared/fixtures beside a checkout, or a copy carried to the machine.
if [[ -z "${RP_FIXTURES_DIR:-}" && ! -d "$root/../shared/fixtures" && -d "$root/offline/fixtures" ]]; then
  export RP_FIXTURES_DIR="$root/offline/fixtures"
fi
if [[ "$parts" == *" tests "* ]]; then
  say "running ctest -L gpu (results in $out/gpu-tests.txt)"
  set +e
  # A crashing test binary names the code it crashed in (tests/support/crash_report.h): no debugger needed.
  (cd "$build" && RP_CRASH_REPORT=1 ctest -L gpu -j "${RP_GPU_TEST_JOBS:-4}" --output-on-failure --no-tests=error) 2>&1 \
    | tee "$out/gpu-tests.txt"
  rc=${PIPESTATUS[0]}
  set -e
  say "ctest -L gpu exited $rc"
fi

# The GPU benchmarks (docs/benchmarks.md, G1 and G3), only where there is a GPU: never timed tests.
if ! nvidia-smi -L 2>/dev/null | grep -q '^GPU '; then
  say "no GPU: the benchmarks not run"
  exit "$rc"
fi
if [[ "$parts" == *" throughput "* ]]; then
  say "benchmarks/gpu_throughput.sh (table in $out/gpu-throughput.txt)"
  RP_BUILD_DIR="$build" "$root/benchmarks/gpu_throughput.sh" 2>&1 | tee "$out/gpu-throughput.txt" || rc=1
fi
if [[ "$parts" == *" peer "* ]]; then
  if [[ -d "$root/offline/wheels" ]] || "$python" -c "import roundpipe" 2>/dev/null; then
    say "benchmarks/gpu_peer.sh: against the reference library (throughput and longest-sequence tables in $out/gpu-peer.txt)"
    RP_BUILD_DIR="$build" RP_PYTHON="$python" "$root/benchmarks/gpu_peer.sh" 2>&1 | tee "$out/gpu-peer.txt" || rc=1
  else
    say "no offline/wheels (benchmarks/peer_wheels.sh): the comparison with the reference library not run"
  fi
fi
exit "$rc"
