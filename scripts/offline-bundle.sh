#!/usr/bin/env bash
# Packs every non-PyTorch build and run dependency of roundpipe (Open MPI and what it needs, HDF5, fmt, CLI11,
# toml++, nlohmann-json, GoogleTest, Google Benchmark, ICU) as Debian packages into one archive, on a connected
# machine of the same distribution family, for GPU machines without a package registry: scripts/gpu-check.sh
# unpacks it under a prefix when the system lacks them (docs/building.md, "GPU machines without a registry").
# No root needed. Usage: scripts/offline-bundle.sh [output archive]   (default offline/roundpipe-deps.tar.gz)
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
out="${1:-$root/offline/roundpipe-deps.tar.gz}"
say() { echo "offline-bundle: $*"; }
for tool in apt-get apt-cache dpkg-deb python3; do
  command -v "$tool" >/dev/null || { say "needs $tool (a Debian-family machine with apt)"; exit 1; }
done

# What the build and the tests need beyond a compiler, CMake and Python.
wanted=(openmpi-bin libopenmpi-dev libhdf5-dev zlib1g-dev libfmt-dev libcli11-dev libtomlplusplus-dev
        nlohmann-json3-dev libgtest-dev libgmock-dev libbenchmark-dev libicu-dev)
# What any machine that builds C++ has: left out (with everything they depend on).
base=(build-essential cmake python3 pkg-config git)
# Pulled in by the packages above but never loaded by the build or a run: Fortran (the MPI and HDF5 Fortran
# bindings), autotools (libltdl-dev), hwloc's optional X11/NVML plugins, account tools (Munge's adduser),
# JPEG headers. (curl's and OpenSSL's dev packages stay: HDF5's compiler wrappers link -lcurl -lcrypto.)
skip=(gfortran-12 libgfortran-12-dev libhdf5-fortran-102 libhdf5-hl-fortran-100 autoconf automake autotools-dev m4
      libhwloc-plugins libx11-6 libx11-data libxau6 libxcb1 libxdmcp6 libxext6 libxnvctrl0 ocl-icd-libopencl1
      libjs-jquery libjs-jquery-ui libpam0g libsemanage-common libsemanage2 libsepol2 libaudit-common libaudit1
      libcap-ng0 libjpeg-dev libjpeg62-turbo libjpeg62-turbo-dev libedit2 libbsd0
      libfido2-1 libcbor0.8)
# The C/C++ runtime and system libraries: every machine has its own, and they must never be shadowed.
system=(libc6 libc6-dev libgcc-s1 libstdc++6 gcc-12-base libquadmath0 libatomic1 libgomp1 zlib1g libuuid1 libudev1
        libcrypt1 openssh-client)

work="$(mktemp -d)"
chmod 755 "$work"  # apt downloads as its sandbox user when run as root
trap 'rm -rf "$work"' EXIT
# The dependency closure, first alternative of each "a | b", a virtual package's first provider; packages of
# priority required/important/standard and the base tools' closure are left out, except the direct
# dependencies of what is packed (a dev package's runtime library).
python3 - "$work/packages.txt" "${wanted[*]}" "${base[*]}" "${skip[*]}" "${system[*]}" <<'PY'
import subprocess, sys
out, wanted, base = sys.argv[1], sys.argv[2].split(), sys.argv[3].split()
skipped, system = set(sys.argv[4].split()), set(sys.argv[5].split())
FLAGS = ["--no-recommends", "--no-suggests", "--no-conflicts", "--no-breaks", "--no-replaces", "--no-enhances"]

def depends(pkgs):
    text = subprocess.run(["apt-cache", "depends", *FLAGS, *pkgs], capture_output=True, text=True, check=True).stdout
    deps, current, alternative, virtual = {}, None, False, False
    for line in text.splitlines():
        if not line.startswith(" "):
            current, alternative, virtual = line.strip(), False, False
            deps.setdefault(current, [])
            continue
        stripped = line.strip()
        if ":" in stripped:
            kind, _, name = stripped.partition(":")
            name = name.strip()
            skip = alternative  # the previous line was "|": this one is an alternative to it
            alternative = kind.startswith("|")
            virtual = name.startswith("<")
            if not skip and not virtual and kind.lstrip("|") in ("Depends", "PreDepends"):
                deps[current].append(name)
            if virtual and not skip:
                virtual = "pending"
            continue
        if virtual == "pending":  # the first provider of a virtual package
            deps[current].append(stripped)
            virtual = True
    return deps

def closure(roots):
    seen, todo = set(), list(roots)
    while todo:
        batch = [p for p in dict.fromkeys(todo) if p not in seen]
        todo = []
        if not batch:
            break
        seen.update(batch)
        for deps in depends(batch).values():
            todo.extend(d.split(":")[0] for d in deps)
    return seen

def priority(pkg):
    text = subprocess.run(["apt-cache", "show", "--no-all-versions", pkg], capture_output=True, text=True).stdout
    for line in text.splitlines():
        if line.startswith("Priority:"):
            return line.split()[1]
    return "optional"

skip = closure(base)
core = ("required", "important")
need = {p for p in closure(wanted) - skip - skipped - system if priority(p) not in core + ("standard",)}
need |= set(wanted)
# A dev package's .so links point at its runtime library: that one comes too, even where a C++ build machine
# usually has it (ICU, curl, OpenSSL), or the links dangle under the prefix.
for deps in depends(sorted(need)).values():
    names = {d.split(":")[0] for d in deps} - skipped - system
    need |= {d for d in names if priority(d) not in core}
need = sorted(need)
open(out, "w").write("\n".join(need) + "\n")
PY
mapfile -t packages <"$work/packages.txt"
say "downloading ${#packages[@]} packages: ${packages[*]}"
mkdir -p "$work/debs"
chmod 777 "$work/debs"  # writable by apt's sandbox user
(cd "$work/debs" && apt-get download -q "${packages[@]}" >/dev/null)
{
  echo "# roundpipe offline dependencies, made $(date -u +%F) on $(. /etc/os-release && echo "$PRETTY_NAME") ($(dpkg --print-architecture))"
  for deb in "$work"/debs/*.deb; do dpkg-deb -f "$deb" Package Version | paste -sd' '; done
} >"$work/debs/MANIFEST"
mkdir -p "$(dirname "$out")"
tar -C "$work/debs" -czf "$out" .
size=$(du -m "$out" | cut -f1)
say "wrote $out (${#packages[@]} packages, ${size} MiB)"
if ((size >= 60)); then say "warning: the archive is ${size} MiB, over the 60 MiB it should stay under"; fi
