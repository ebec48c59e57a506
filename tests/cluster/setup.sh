# Sourced by the cluster tests once $train, $fixtures and $cluster are set: skips (one line, exit 77) where the
# tier cannot run, brings up 3 hosts (scripts/cluster.sh, state in $RP_CLUSTER_DIR) and, on exit, runs the
# test's `on_exit` (if it defines one), tears the cluster down and removes $work and $RP_CLUSTER_DIR.
model="$fixtures/models/tinystories-656k"
test_script="$(cd "$(dirname "$0")" && pwd)/$(basename "$0")" test_args=("$train" "$fixtures" "$cluster")
if [[ ! -d "$model" ]]; then echo "SKIP: $model not found"; exit 77; fi
if ! why="$("$cluster" check)"; then echo "SKIP: cluster tier: $why"; exit 77; fi
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 RP_NUM_THREADS=1
work="$(mktemp -d)"
cd "$work"  # mpirun's and sbatch's jobs run where they are started
owned=0  # only the test that brought the cluster up tears it down (another suite's may be up meanwhile)
trap 'declare -F on_exit >/dev/null && on_exit; ((owned)) && "$cluster" down; rm -rf "$work" "$RP_CLUSTER_DIR"' EXIT
# A rank that crashes leaves its core in its job's directory ($work, above) and fail() prints every thread's stack
# (Open MPI's own report of a crash can show a single frame: a jump through a null pointer), with the tails of the
# jobs' and the Slurm daemons' logs.
ulimit -c unlimited 2>/dev/null || true
# Note [Open MPI's start-up crash]: in a few cluster.slurm_sbatch runs in a hundred (4 ranks started by srun), a
# rank dies inside MPI_Init_thread: Open MPI 4.1.4's TCP BTL receives a peer's first message (tag 0x41, the ob1
# PML's matched send) before this rank's PML registered its handler, and calls it (a jump to address 0;
# docs/testing.md). None of our code has run then, so a test whose rank crashed there runs again from a fresh
# cluster, saying so, at most twice (two suites at once on two cores once crashed there twice in a row); a crash
# anywhere else, or a third one, fails the test.
crashed_in_mpi_init() {
  command -v gdb >/dev/null || return 1
  local core
  while IFS= read -r core; do
    gdb -batch -ex "bt 30" "$train" "$core" 2>/dev/null | grep -q "in PMPI_Init_thread ()" && return 0
  done < <(find "$work" -maxdepth 2 -type f -name "core*" 2>/dev/null)
  return 1
}
fail() {
  echo "FAIL: $*"
  tail -n 20 "$work"/*.log "$work"/*.out "$work"/logs/* "$RP_CLUSTER_DIR"/log/slurmd-*.log 2>/dev/null
  echo "--- /dev/shm (Open MPI's shared-memory segments: a killed rank leaves its own)"
  ls -la --time-style=+%T /dev/shm
  local core
  while IFS= read -r core; do
    echo "--- $core"
    if command -v gdb >/dev/null; then
      # Every thread's stack, and where the libraries in them were loaded (Open MPI's have no symbols here: an
      # address less its library's start is the offset to look up in that library).
      gdb -batch -ex "thread apply all bt 20" -ex "info sharedlibrary" "$train" "$core" 2>/dev/null |
        grep -E "^(#|Program|Thread )|0x.*(openmpi|open-pal|open-rte|libmpi|pmix|event)"
    else
      echo "(gdb is not installed: no stack)"
    fi
  done < <(find "$work" -maxdepth 2 -type f -name "core*" 2>/dev/null)
  local retried=${RP_CLUSTER_RETRIED:-0}
  if ((retried < 2)) && crashed_in_mpi_init; then
    # At that crash rsi holds the fragment's tag (the handler's second argument): which component it was for.
    find "$work" -maxdepth 2 -type f -name "core*" -exec gdb -batch -ex "info registers rip rsi" "$train" {} \; \
      2>/dev/null | grep -E "^(rip|rsi) "
    echo "RETRY: a rank crashed inside MPI_Init_thread, before any of our code ran (Note [Open MPI's start-up" \
      "crash], tests/cluster/setup.sh): running the test again on a fresh cluster (retry $((retried + 1)) of 2)"
    trap - EXIT
    declare -F on_exit >/dev/null && on_exit
    ((owned)) && "$cluster" down
    cd / && rm -rf "$work" "$RP_CLUSTER_DIR"
    RP_CLUSTER_RETRIED=$((retried + 1)) exec bash "$test_script" "${test_args[@]}"
  fi
  exit 1
}
# The PML the test runs its jobs on: ob1 over TCP (cluster.<test>) or UCX over TCP (cluster.<test>.ucx, whose
# environment selects it: docs/launch.md, "ob1/TCP or UCX"), as the run's first lines name it.
pml="${OMPI_MCA_pml:-ob1}"
expect_pml() {
  grep -q "MPI: .*; PML $pml" "$1" || fail "$1: the run does not say it ran on PML $pml: $(grep -m1 'MPI: ' "$1")"
  echo "ok: PML $pml: $(grep -m1 -o 'MPI: .*' "$1")"
}
# One cluster per machine: while another run's is up (exit 75), wait for it; what a killed run left, `up` removes.
export RP_CLUSTER_OWNER=$$
deadline=$((SECONDS + 240))
until "$cluster" up 3 2>"$work/up.err"; do
  code=$?
  cat "$work/up.err" >&2
  ((code == 75 && SECONDS < deadline)) || fail "the cluster did not come up (exit $code)"
  sleep 5
done
cat "$work/up.err" >&2
owned=1
