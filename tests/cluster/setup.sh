# Sourced by the cluster tests once $train, $fixtures and $cluster are set: skips (one line, exit 0) where the
# tier cannot run, brings up 3 hosts (scripts/cluster.sh, state in $RP_CLUSTER_DIR) and, on exit, runs the
# test's `on_exit` (if it defines one), tears the cluster down and removes $work and $RP_CLUSTER_DIR.
model="$fixtures/models/tinystories-656k"
if [[ ! -d "$model" ]]; then echo "SKIP: $model not found"; exit 0; fi
if ! why="$("$cluster" check)"; then echo "SKIP: cluster tier: $why"; exit 0; fi
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 RP_NUM_THREADS=1
work="$(mktemp -d)"
cd "$work"  # mpirun's and sbatch's jobs run where they are started
owned=0  # only the test that brought the cluster up tears it down (another suite's may be up meanwhile)
trap 'declare -F on_exit >/dev/null && on_exit; ((owned)) && "$cluster" down; rm -rf "$work" "$RP_CLUSTER_DIR"' EXIT
# A rank that crashes leaves its core in its job's directory ($work, above) and fail() prints the crashing
# thread's stack (Open MPI's own report of a crash can show a single frame: a jump through a null pointer), with the
# tails of the jobs' and the Slurm daemons' logs.
ulimit -c unlimited 2>/dev/null || true
fail() {
  echo "FAIL: $*"
  tail -n 20 "$work"/*.log "$work"/*.out "$work"/logs/* "$RP_CLUSTER_DIR"/log/slurmd-*.log 2>/dev/null
  local core
  while IFS= read -r core; do
    echo "--- $core"
    if command -v gdb >/dev/null; then
      gdb -batch -ex "bt 20" "$train" "$core" 2>/dev/null | grep -E "^(#|Program)"
    else
      echo "(gdb is not installed: no stack)"
    fi
  done < <(find "$work" -maxdepth 2 -type f -name "core*" 2>/dev/null)
  exit 1
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
