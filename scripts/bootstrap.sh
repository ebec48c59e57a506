#!/usr/bin/env bash
# Installs everything roundpipe needs to build and test, and nothing more: Debian packages (apt) and the
# project venv (.venv) with the pinned torch wheel whose LibTorch we link. Idempotent and fast when all
# is present (docs/building.md lists what and why).
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"

apt_packages=(
  build-essential cmake ninja-build ccache mold pkg-config git   # mold: links in a third of GNU ld's time
  openmpi-bin libopenmpi-dev libucx-dev         # MPI processes; UCX for multi-node transports
  libhdf5-dev zlib1g-dev                        # checkpoints (serial HDF5; zlib's crc32 for checksums)
  libgtest-dev libgmock-dev libbenchmark-dev    # tests and benchmarks
  libcli11-dev nlohmann-json3-dev libtomlplusplus-dev libfmt-dev
  libicu-dev                                    # tokenizer: Unicode normalization and regexes
  clang libclang-rt-14-dev                      # the fuzz targets (libFuzzer, ASan, UBSan)
  fortunes                                      # the demo's corpus when ../shared is absent
  slurmd slurmctld slurm-client munge           # the cluster tier's real Slurm (scripts/cluster.sh)
  iproute2 util-linux                           # its hosts: network namespaces, nsenter, unshare, tc
  gdb                                           # its failures: a crashed rank's stack from its core
)

say() { echo "bootstrap: $*"; }

missing=()
for pkg in "${apt_packages[@]}"; do
  if [[ "$(dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null)" != "install ok installed" ]]; then
    missing+=("$pkg")
  fi
done
if ((${#missing[@]})); then
  sudo=""
  if [[ $(id -u) -ne 0 ]]; then sudo="sudo"; fi
  say "installing ${#missing[@]} Debian package(s): ${missing[*]}"
  $sudo env DEBIAN_FRONTEND=noninteractive apt-get -o DPkg::Lock::Timeout=600 update -qq
  $sudo env DEBIAN_FRONTEND=noninteractive apt-get -o DPkg::Lock::Timeout=600 install -y -qq \
    --no-install-recommends "${missing[@]}" >/dev/null
else
  say "Debian packages present"
fi

# The venv: created once; re-synced whenever scripts/requirements.txt changes.
venv="$root/.venv"
stamp="$venv/.requirements.sha256"
want="$(sha256sum scripts/requirements.txt | cut -d' ' -f1)"
if [[ ! -x "$venv/bin/python" ]]; then
  python="${RP_BOOTSTRAP_PYTHON:-python3}"
  say "creating $venv with $($python --version 2>&1)"
  if ! "$python" -m venv "$venv"; then
    say "python venv module missing; installing python3-venv"
    apt-get -o DPkg::Lock::Timeout=600 install -y -qq python3-venv >/dev/null
    "$python" -m venv "$venv"
  fi
fi
# uv installs the wheels: it unpacks each once into its cache (~/.cache/uv) and hard-links them into every
# venv after, so a fresh clone's venv takes ~30 s instead of pip's ~2.5 minutes of unpacking ~6 GB each time.
# The bytecode is compiled at install, as pip does: Python does not write it where PYTHONDONTWRITEBYTECODE is
# set (on our machines), and without it every test that imports torch and transformers spends ~10 s more.
uv_version=0.13.9
if [[ "$(cat "$stamp" 2>/dev/null)" != "$want" ]]; then
  say "installing Python requirements (torch wheel with CUDA 13 libraries: ~6 GB) with uv $uv_version"
  if [[ "$("$venv/bin/uv" --version 2>/dev/null)" != "uv $uv_version"* ]]; then
    "$venv/bin/python" -m pip install -q "uv==$uv_version"
  fi
  "$venv/bin/uv" pip install -q --native-tls --compile-bytecode --python "$venv/bin/python" -r scripts/requirements.txt
  echo "$want" >"$stamp"
else
  say "venv up to date (torch $("$venv/bin/python" -c 'import importlib.metadata as m; print(m.version("torch"))'))"
fi
