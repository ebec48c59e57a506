#!/usr/bin/env bash
# The GPU check, in two budgeted parts that each fit one call to a lent GPU machine (docs/gpu.md gives the
# exact calls). Every step runs under a hard time cap and is recorded, with its command, in $OUT/results.json
# and $OUT/results.md (scripts/gpu_report.py); the logs go to $OUT/log.txt (and the bench's to bench-log.txt).
#   --part build+tests  unpack the carry, build what the GPU tier runs against this machine's PyTorch for its GPU
#                       (Ninja, -j$(nproc), unity, PCH), prepare the peer (its wheels, its JIT-built CPU Adam, in the
#                       background, under a cap of its own: cut off, it says so and the bench part prepares it
#                       again), run the GPU tier (`ctest -L '^gpu$'`: on a GPU machine a skipped test is a failure)
#                       and unit.LinkOrder, then benchmarks/gpu_bench.py's G1 and its G3 in the time left.
#   --part bench        benchmarks/gpu_bench.py's G2 (async against roundpipe 0.1.1, and G1's sync run; the reference
#                       before the emulated row), its G3, the emulated device's calibration and the longest-sequence
#                       ladder in the time left (builds first where the build is missing).
#   --budget S          seconds the part may take in all [480]; each step gets what is left, less a margin.
#   --dry-run           (or RP_GPU_DRY_RUN=1) the same plan on the CPU backend and tiny shapes, on any machine:
#                       the build step builds the same targets, the GPU tests skip themselves, the benchmarks run
#                       configs/builtin-tiny on 2 CPU ranks and the peer is skipped (tests/gpu/check_dry_run.sh).
# Environment: RP_PYTHON [python3 on PATH: a torch >= 2.6; CUDA-enabled unless a dry run], RP_BUILD_DIR
# [build-gpu; a dry run: build], OUT [out/gpu-check], RP_GPU_CARRY [offline/gpu-carry.tar.xz, made by
# scripts/offline-bundle.sh: the Debian packages this machine lacks, fixtures, goldens, the peer's wheels],
# RP_USE_BUNDLE=1 (the carry's packages even where the system has them). Exit: 0 when every step that ran passed.
set -uo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
part="" budget=480 dry="${RP_GPU_DRY_RUN:-0}"
while (($#)); do
  case "$1" in
    --part) part="$2"; shift 2 ;;
    --budget) budget="$2"; shift 2 ;;
    --dry-run) dry=1; shift ;;
    *) echo "gpu-check: unknown argument $1 (--part build+tests|bench, --budget seconds, --dry-run)"; exit 2 ;;
  esac
done
[[ "$part" == build+tests || "$part" == bench ]] || { echo "gpu-check: --part build+tests or --part bench"; exit 2; }
python="${RP_PYTHON:-$(command -v python3 || true)}"
if [[ "$dry" == 1 ]]; then build="${RP_BUILD_DIR:-$root/build}"; else build="${RP_BUILD_DIR:-$root/build-gpu}"; fi
out="${OUT:-$root/out/gpu-check}"
carry="${RP_GPU_CARRY:-$root/offline/gpu-carry.tar.xz}"
unpacked="$root/offline/carry"
prefix="$root/offline/prefix"
report="$root/scripts/gpu_report.py"
mkdir -p "$out"
log="$out/log.txt"
: >"$log"
say() { echo "gpu-check: $*" | tee -a "$log"; }
left() { echo $((budget - SECONDS)); }
failures=0
# record <name> <status> <seconds> <command> [detail]
record() {
  python3 "$report" step "$out" "$@"
  [[ "$2" == ok || "$2" == skipped ]] || failures=$((failures + 1))
  say "$1: $2 ($3 s) ${5:-}"
}
# step <name> <cap seconds> <command...>: runs it under `timeout` (the whole process group), output to the log.
step() {
  local name="$1" cap="$2" t0=$SECONDS rc status; shift 2
  local room=$(( $(left) - 10 ))
  ((cap > room)) && cap=$room
  if ((cap < 5)); then record "$name" skipped 0 "$*" "budget: $(left) s left"; return 1; fi
  echo "=== $name (cap $cap s): $*" >>"$log"
  timeout -k 5 "$cap" "$@" >>"$log" 2>&1
  rc=$?
  case $rc in 0) status=ok ;; 124|137) status=timeout ;; *) status=failed ;; esac
  record "$name" "$status" $((SECONDS - t0)) "$*" "$( ((rc == 0)) || tail -3 "$log" | tr '\n|' ' /' | cut -c1-300)"
  return $rc
}

# PyTorch: LibTorch for the build, and what it says about the GPUs.
[[ -n "$python" ]] || { say "no python3 on PATH; set RP_PYTHON to a Python with torch"; exit 1; }
info="$("$python" - "$dry" 2>&1 <<'PY'
import sys
import torch
major, minor = (int(x) for x in torch.__version__.split("+")[0].split(".")[:2])
n = torch.cuda.device_count() if torch.cuda.is_available() else 0
names = ", ".join(torch.cuda.get_device_name(i) for i in range(n))
print(f"torch {torch.__version__} (CUDA {torch.version.cuda})|{n} GPU(s){': ' + names if n else ''}")
if (major, minor) < (2, 6) or (sys.argv[1] != "1" and (torch.version.cuda is None or n == 0)):
    sys.exit("needs torch >= 2.6 with CUDA and a usable GPU (or --dry-run)")
PY
)" || { echo "$info" | tee -a "$log"; say "$python cannot supply LibTorch with a GPU (set RP_PYTHON, or --dry-run)"; exit 1; }
commit="$(git -C "$root" rev-parse --short HEAD 2>/dev/null || echo unknown)$(git -C "$root" diff --quiet HEAD 2>/dev/null || echo +changes)"
device="${info#*|}"
[[ "$dry" == 1 ]] && device="dry run on $(nproc) CPU cores (${device})"
python3 "$report" init "$out" "$part" "$dry" "$device" "$commit" "${info%%|*}" "$budget"
say "part $part, budget $budget s, $device, ${info%%|*}, commit $commit"

# The carry: unpacked once per machine (a warm machine keeps it between the two calls).
if [[ -f "$carry" ]]; then
  # By content, not time: the second call carries the same archive again with a new mtime.
  sum="$(sha256sum "$carry" | cut -c1-16)"
  if [[ "$(cat "$unpacked/.done" 2>/dev/null)" != "$sum" ]]; then
    rm -rf "$unpacked" "$prefix"
    mkdir -p "$unpacked"
    step carry 120 tar -C "$unpacked" -xJf "$carry" && echo "$sum" >"$unpacked/.done"
  else
    record carry ok 0 "" "unpacked by an earlier call"
  fi
else
  record carry skipped 0 "" "no $carry (scripts/offline-bundle.sh): dependencies, fixtures and wheels from the machine"
fi
if [[ -z "${RP_FIXTURES_DIR:-}" && ! -d "$root/../shared/fixtures" && -d "$unpacked/fixtures" ]]; then
  export RP_FIXTURES_DIR="$unpacked/fixtures"
fi
if [[ -z "${RP_GOLDEN_DIR:-}" ]]; then
  if [[ -d "$unpacked/goldens" ]]; then export RP_GOLDEN_DIR="$unpacked/goldens"
  elif [[ -d "$build/goldens" ]]; then export RP_GOLDEN_DIR="$build/goldens"; fi
fi

# The Debian dependencies: the system's, or the carry's under $prefix.
have_system_deps() {
  if ! command -v mpicxx >/dev/null || ! command -v mpirun >/dev/null; then echo "Open MPI"; return 1; fi
  local h
  for h in hdf5/serial/H5Cpp.h fmt/format.h CLI/CLI.hpp toml++/toml.h nlohmann/json.hpp gtest/gtest.h \
           gmock/gmock.h unicode/normalizer2.h zlib.h; do
    [[ -e /usr/include/$h || -e /usr/local/include/$h ]] || { echo "$h"; return 1; }
  done
}
cmake_args=()
# The peer (Python, the machine's own libraries) runs without the carry's library directories.
export RP_PEER_LD_LIBRARY_PATH="${LD_LIBRARY_PATH:-}"
if lacking="$(have_system_deps)" && [[ "${RP_USE_BUNDLE:-0}" != 1 ]]; then
  record deps ok 0 "" "the system's"
else
  [[ -f "$unpacked/debs/MANIFEST" ]] || { record deps failed 0 "" "the system lacks $lacking and there is no carry"; exit 1; }
  arch="$(dpkg --print-architecture 2>/dev/null | sed 's/amd64/x86_64/;s/arm64/aarch64/')-linux-gnu"
  lib="$prefix/usr/lib/$arch"
  if [[ ! -f "$prefix/.unpacked" ]]; then
    t0=$SECONDS
    rm -rf "$prefix"; mkdir -p "$prefix"
    printf '%s\n' "$unpacked"/debs/*.deb | xargs -P "$(nproc)" -I{} dpkg-deb -x {} "$prefix"
    # Relocate what hard-codes /usr: HDF5's compiler wrappers; Open MPI's finds itself through OPAL_PREFIX.
    sed -i "s|^prefix=\"/usr\"|prefix=\"$prefix/usr\"|" "$prefix"/usr/bin/h5cc "$prefix"/usr/bin/h5c++
    for tool in mpirun mpiexec mpicc mpicxx mpic++; do ln -sf "$tool.openmpi" "$prefix/usr/bin/$tool"; done
    # The carry's libcurl (HDF5 links it for its ros3 driver) needs Debian 12's LDAP and libssh2, which other
    # distributions name differently: where the system has a libcurl.so.4 of its own, HDF5 gets that one.
    syscurl="$(ldconfig -p 2>/dev/null | awk '$1 == "libcurl.so.4" {print $NF; exit}')"
    if [[ -n "$syscurl" ]]; then for so in "$lib"/libcurl.so*; do ln -sf "$syscurl" "$so"; done; fi
    touch "$prefix/.unpacked"
    rm -f "$build/CMakeCache.txt"  # found paths from an earlier prefix are stale
    record deps ok $((SECONDS - t0)) "dpkg-deb -x (the carry's debs)" \
      "the carry's $(grep -vc '^#' "$unpacked/debs/MANIFEST") packages (the system lacks $lacking)${syscurl:+; HDF5 uses $syscurl}"
  else
    record deps ok 0 "" "the carry's packages, unpacked by an earlier call"
  fi
  export PATH="$prefix/usr/bin:$PATH"
  export LD_LIBRARY_PATH="$lib:$lib/openmpi/lib:$lib/hdf5/serial${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
  export OPAL_PREFIX="$prefix/usr"
  export CMAKE_PREFIX_PATH="$prefix/usr${CMAKE_PREFIX_PATH:+:$CMAKE_PREFIX_PATH}"
  export PKG_CONFIG_PATH="$lib/pkgconfig${PKG_CONFIG_PATH:+:$PKG_CONFIG_PATH}"
  cmake_args+=(-DMPI_C_COMPILER="$prefix/usr/bin/mpicc" -DMPI_CXX_COMPILER="$prefix/usr/bin/mpicxx"
               -DMPIEXEC_EXECUTABLE="$prefix/usr/bin/mpiexec" -DHDF5_C_COMPILER_EXECUTABLE="$prefix/usr/bin/h5cc"
               -DHDF5_CXX_COMPILER_EXECUTABLE="$prefix/usr/bin/h5c++")
fi

# Build only what the parts run, for this machine's GPU architecture.
targets=(roundpipe_train test_gpu_device test_cuda_worker test_cuda_stream_order test_cuda_nf4 test_cuda_marks test_gpu_attention test_gpu_pipeline test_pipeline
         test_link_order)
build_step() {
  if [[ ! -f "$build/CMakeCache.txt" ]]; then
    local archs
    archs="$(nvidia-smi --query-gpu=compute_cap --format=csv,noheader 2>/dev/null | tr -d . | sort -u | paste -sd';')"
    local generator=()
    command -v ninja >/dev/null && generator=(-G Ninja)
    step configure 180 cmake -S "$root" -B "$build" "${generator[@]}" -DRP_PYTHON="$python" \
      -DRP_CUDA_ARCHITECTURES="${archs:-90}" -DRP_WERROR=OFF "${cmake_args[@]}" || return 1
  fi
  step build 420 cmake --build "$build" -j "$(nproc)" --target "${targets[@]}"
}

# ctest runs from a directory of this run's whose one test directory is the build's: CTest writes its logs
# (Testing/Temporary, LastTest.log) where it runs, and a dry run's build is the suite's own, whose ctest is writing
# there meanwhile (gpucheck.dry_run).
ctest_dir="$(mktemp -d)"
trap 'rm -rf "$ctest_dir"' EXIT
printf 'subdirs("%s")\n' "$(realpath -m "$build")" >"$ctest_dir/CTestTestfile.cmake"

# The peer (roundpipe 0.1.1): its wheels into a site directory, its CPU Adam built by torch's JIT (into the build
# directory, so the bench part finds it built), then a mark that both are done: a preparation cut off by its cap
# leaves none, and the bench part prepares again. A JIT build killed midway leaves its lock file behind, and torch
# would wait for it forever: a preparation starts by removing the locks (nothing else builds there meanwhile).
peer_site="$build/peer-site"
peer_cap=180
export TORCH_EXTENSIONS_DIR="$build/torch-extensions"
peer_prepare() {
  [[ -d "$unpacked/wheels" ]] || { echo "no wheels in the carry"; return 1; }
  export LD_LIBRARY_PATH="$RP_PEER_LD_LIBRARY_PATH"
  rm -f "$peer_site/.prepared"
  [[ -d "$TORCH_EXTENSIONS_DIR" ]] && find "$TORCH_EXTENSIONS_DIR" -name lock -type f -delete
  "$python" -m pip install -q --no-index --no-deps --no-compile --upgrade --target "$peer_site" "$unpacked"/wheels/*.whl &&
    PYTHONPATH="$peer_site${PYTHONPATH:+:$PYTHONPATH}" "$python" -c \
      "from roundpipe.optim.optim_builder import load_optim_function; load_optim_function('adam')" &&
    touch "$peer_site/.prepared"
}
export unpacked python peer_site
export -f peer_prepare

# bench_step <figures>: benchmarks/gpu_bench.py in the time left.
bench_step() {
  local dryFlag=()
  [[ "$dry" == 1 ]] && dryFlag=(--dry-run)
  step "bench-$1" $(( $(left) - 10 )) python3 "$root/benchmarks/gpu_bench.py" --build "$build" --out "$out" \
    --budget $(( $(left) - 25 )) --figures "$1" --python "$python" "${dryFlag[@]}"
}

if [[ "$part" == build+tests ]]; then
  build_step
  built=$?
  peer_pid=""
  if [[ "$dry" != 1 ]]; then
    # In the background, under its cap (and the budget): `timeout` ends the whole preparation, pip and the JIT build.
    t_peer=$SECONDS
    room=$(( $(left) - 10 ))
    ((peer_cap > room)) && peer_cap=$room
    if ((peer_cap < 5)); then
      record peer-prepare skipped 0 "peer_prepare" "budget: $(left) s left"
    else
      timeout -k 5 "$peer_cap" bash -c peer_prepare >"$build/peer-prepare.log" 2>&1 &
      peer_pid=$!
    fi
  fi
  if ((built == 0)); then
    export RP_CRASH_REPORT=1  # a crashing test binary names the code it crashed in
    t0=$SECONDS
    jobs=8; [[ "$dry" == 1 ]] && jobs=2  # a dry run runs inside the CI suite
    step tests 300 ctest --test-dir "$ctest_dir" -L '^gpu$' -j "$jobs" --output-on-failure --no-tests=error
    rc=$?
    # ctest's own count (it counts a skip as passed), the skipped and the failed by name.
    section="$(awk '/^=== tests/{on=1} on' "$log")"
    counts="$(grep -oE '[0-9]+ tests? failed out of [0-9]+' <<<"$section" | tail -1)"
    skips="$(grep -E '\(Skipped\)$' <<<"$section" | sed -E 's/^[[:space:]]*[0-9]+ - ([^ ]+).*/\1/')"
    failed_names="$(grep -E '\((Failed|Timeout|SEGFAULT|Subprocess aborted|Not Run|Exception)\)$' <<<"$section" \
      | sed -E 's/^[[:space:]]*[0-9]+ - ([^ ]+).*/\1/' | paste -sd' ')"
    total="$(grep -oE '[0-9]+$' <<<"$counts")" failed_count="$(grep -oE '^[0-9]+' <<<"$counts")"
    skipped_count="$(grep -c . <<<"$skips")"
    summary="${total:-?} tests: $(( ${total:-0} - ${failed_count:-0} - skipped_count )) passed, ${failed_count:-?} failed,"
    summary+=" $skipped_count skipped${failed_names:+; failed: $failed_names}"
    # Skips allowed on a GPU machine: the NCCL case where it has fewer than the 2 GPUs it needs. A dry run has none.
    allowed='^$'
    (( $(nvidia-smi -L 2>/dev/null | grep -c '^GPU ') < 2 )) && allowed='^gpu\.pipeline_nccl$'
    bad_skips="$(grep . <<<"$skips" | grep -vE "$allowed" | paste -sd' ')"
    if [[ -z "$counts" ]]; then
      record tests-summary failed 0 "" "no ctest summary in the log"
    elif [[ "$dry" != 1 && -n "$bad_skips" ]]; then
      record tests-summary failed 0 "" "$summary; skipped on a GPU machine: $bad_skips"
    else
      record tests-summary "$( ((rc == 0 && failed_count == 0)) && echo ok || echo failed)" 0 "" "$summary"
    fi
  fi
  # Which libstdc++ answers std::filesystem in a LibTorch program on this machine (Note [One libstdc++]).
  step link-order 60 ctest --test-dir "$ctest_dir" -R '^unit\.LinkOrder$' --output-on-failure --no-tests=error
  if [[ -n "$peer_pid" ]]; then
    wait "$peer_pid"
    rc=$?
    case $rc in
      0) record peer-prepare ok $((SECONDS - t_peer)) "peer_prepare" "wheels installed, CPU Adam built" ;;
      124|137) record peer-prepare timeout $((SECONDS - t_peer)) "peer_prepare" \
                 "cut off by its $peer_cap s cap (the bench part prepares it again): $(tail -3 "$build/peer-prepare.log" | tr '\n|' ' /')" ;;
      *) record peer-prepare failed $((SECONDS - t_peer)) "peer_prepare" "$(tail -3 "$build/peer-prepare.log" | tr '\n|' ' /')" ;;
    esac
  fi
  # G1 and its G3 in the time left (the bench part takes G2 and the ladder).
  if ((built == 0)); then bench_step g1; fi
else
  [[ -x "$build/src/cli/roundpipe_train" ]] || build_step || { python3 "$report" render "$out"; exit 1; }
  if [[ "$dry" != 1 && ! -f "$peer_site/.prepared" ]]; then
    step peer-prepare "$peer_cap" bash -c peer_prepare
    case $? in
      124|137)  # the reference's runs build what is left; a lock left by the killed build would hold them up
        find "$TORCH_EXTENSIONS_DIR" -name lock -type f -delete 2>/dev/null
        say "peer-prepare: cut off by its $peer_cap s cap; the reference's runs will build what is left" ;;
    esac
  fi
  export PYTHONPATH="$peer_site${PYTHONPATH:+:$PYTHONPATH}"
  bench_step g2
fi
python3 "$report" render "$out"
say "done in $SECONDS s: $failures step(s) failed; $out/results.md"
((failures == 0))
