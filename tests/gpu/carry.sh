#!/usr/bin/env bash
# The GPU check's carry (scripts/offline-bundle.sh) as a lent GPU machine gets it: built from the cached downloads
# (the first run downloads ~45 MiB: where the registry cannot be reached then, it skips with one line), within its 55 MiB bound and, with the checkout beside it, within the 64 MiB
# a call carries; its MANIFEST lists what the build needs, none of the system libraries every machine has, the
# fixtures and golden the GPU tier reads, and the peer's wheels; the peer's Qwen3 wrapper from that wheel, as
# benchmarks/peer_roundpipe_ref.py adapts it, reproduces this venv's transformers (peer_adapter_check.py).
# Usage: carry.sh <goldens dir> <venv python>
set -uo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
fixtures="${RP_FIXTURES_DIR:-$root/../shared/fixtures}"
if [[ ! -d "$fixtures/models" ]]; then echo "SKIP: the shared fixtures ($fixtures) not found"; exit 77; fi
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
RP_GOLDEN_DIR="$1" RP_FIXTURES_DIR="$fixtures" "$root/scripts/offline-bundle.sh" "$work/carry.tar.xz" >"$work/bundle.log" 2>&1
code=$?
if ((code == 75)); then  # a cold cache and no registry: nothing this test could check (label network)
  cat "$work/bundle.log" >&2; echo "SKIP: $(grep -m1 "cannot reach the registry" "$work/bundle.log")"; exit 77
fi
((code == 0)) || { cat "$work/bundle.log"; echo "FAIL: scripts/offline-bundle.sh exited $code"; exit 1; }
tar -C "$work" -xJf "$work/carry.tar.xz" ./MANIFEST ./debs/MANIFEST ./wheels \
  || { echo "FAIL: no MANIFEST or wheels in the archive"; exit 1; }
checkout=$(git -C "$root" ls-files -z | (cd "$root" && xargs -0 stat -c %s 2>/dev/null) | awk '{s += $1} END {print s}')
python3 - "$work" "$(stat -c %s "$work/carry.tar.xz")" "$checkout" <<'PY' || exit 1
import re, sys
work, archive, checkout = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
files = {line.split(" ", 1)[1].strip() for line in open(f"{work}/MANIFEST") if line.strip()}
packages = {line.split()[0] for line in open(f"{work}/debs/MANIFEST") if line.strip() and not line.startswith("#")}
errors = []
for p in ("openmpi-bin", "libopenmpi-dev", "libhdf5-dev", "libfmt-dev", "libcli11-dev", "libtomlplusplus-dev",
          "nlohmann-json3-dev", "libgtest-dev", "libgmock-dev", "libicu-dev"):
    if p not in packages:
        errors.append(f"package {p} missing")
for p in ("libc6", "libstdc++6", "libgcc-s1", "zlib1g", "gfortran-12"):
    if p in packages:
        errors.append(f"package {p} packed: every machine has its own")
for f in ("fixtures/models/tinystories-656k/config.json", "fixtures/models/tinystories-656k/model.safetensors",
          "fixtures/text/tinyshakespeare.txt", "goldens/qwen3-tiny/model.safetensors", "goldens/qwen3-tiny/config.json"):
    if f not in files:
        errors.append(f"{f} missing")
for w in ("roundpipe-0.1.1-", "beartype-"):
    if not any(re.match(rf"wheels/{re.escape(w)}.*\.whl$", f) for f in files):
        errors.append(f"wheel {w}* missing")
if archive > 55 * 2**20:
    errors.append(f"the archive is {archive / 2**20:.1f} MiB, over 55")
if archive + checkout > 64 * 2**20:
    errors.append(f"the archive and the checkout are {(archive + checkout) / 2**20:.1f} MiB, over the 64 a call carries")
for e in errors:
    print("FAIL:", e)
if not errors:
    print(f"ok: {len(packages)} packages, {len(files)} files, {archive / 2**20:.1f} MiB "
          f"(+ {checkout / 2**20:.1f} MiB of checkout)")
sys.exit(1 if errors else 0)
PY
"$2" "$root/tests/gpu/peer_adapter_check.py" "$work"/wheels/roundpipe-0.1.1-*.whl "$root/benchmarks"
