#!/usr/bin/env bash
# The GPU check's carry (docs/gpu.md): one xz archive of everything a lent GPU machine without a package
# registry lacks, made on a connected Debian-family machine. It holds
#   debs/      every non-PyTorch build and run dependency of roundpipe (Open MPI and what it needs, HDF5, fmt,
#              CLI11, toml++, nlohmann-json, GoogleTest, ICU) as Debian packages, with debs/MANIFEST;
#   fixtures/  the shared fixtures the GPU tier reads (the TinyStories checkpoint, tiny-shakespeare);
#   goldens/   the generated Qwen3 golden the MPI cases on the GPU read (from a build's goldens/);
#   wheels/    the peer's wheels the GPU machine's python3 lacks (roundpipe 0.1.1 and beartype; its torch,
#              transformers, ninja, py-cpuinfo, tqdm and typing-extensions are there already);
#   MANIFEST   one line per file: its size in bytes and its path.
# scripts/gpu-check.sh unpacks it (RP_GPU_CARRY). The archive must stay within RP_CARRY_MAX_MIB [55]: a call
# to the GPU machine carries 64 MiB with the checkout. Downloads are cached in RP_OFFLINE_CACHE
# [~/.cache/roundpipe/offline], so a rebuild (the CI check, tests/gpu/carry.sh) downloads nothing new.
# No root needed. Usage: scripts/offline-bundle.sh [archive]   (default offline/gpu-carry.tar.xz)
# Exit: 0 made; 75 a download the cache lacks could not reach its registry; 1 anything else.
# Environment: RP_FIXTURES_DIR [../shared/fixtures], RP_GOLDEN_DIR [build/goldens], RP_PIP [.venv/bin/pip].
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
out="${1:-$root/offline/gpu-carry.tar.xz}"
fixtures="${RP_FIXTURES_DIR:-$root/../shared/fixtures}"
goldens="${RP_GOLDEN_DIR:-$root/build/goldens}"
pip="${RP_PIP:-$root/.venv/bin/pip}"
cache="${RP_OFFLINE_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/roundpipe/offline}"
maxMib="${RP_CARRY_MAX_MIB:-55}"
say() { echo "offline-bundle: $*"; }
# fetch <what> <command...>: a download. Where it fails for want of the registry (no name, no route, no
# connection, no proxy), exit 75 saying so: tests/gpu/carry.sh (label network) reports that as a skip. Any
# other failure is one (exit 1).
fetch() {
  local what="$1"; shift
  "$@" 2>"$work/fetch.err" && return 0
  cat "$work/fetch.err" >&2
  if grep -qiE "could not resolve|temporary failure|failed to fetch|could not connect|unable to connect|connection refused|newconnectionerror|failed to establish|network is unreachable|timed? ?out|proxyerror|cannot connect to proxy" \
      "$work/fetch.err"; then
    say "cannot reach the registry to download $what (exit 75): the cache $cache lacks it" >&2
    exit 75
  fi
  say "downloading $what failed" >&2
  exit 1
}
for tool in apt-get apt-cache dpkg-deb python3 xz; do
  command -v "$tool" >/dev/null || { say "needs $tool (a Debian-family machine with apt)"; exit 1; }
done
# What the GPU tier and the benchmarks read (tests/gpu/, benchmarks/gpu_bench.py).
fixtureFiles=(NOTICE.md models/tinystories-656k text/tinyshakespeare.txt)
goldenDirs=(qwen3-tiny)
wheels=(roundpipe==0.1.1 beartype==0.23.1)
for f in "${fixtureFiles[@]}"; do
  [[ -e "$fixtures/$f" ]] || { say "$fixtures/$f not found (RP_FIXTURES_DIR: the shared fixtures)"; exit 1; }
done
for g in "${goldenDirs[@]}"; do
  [[ -d "$goldens/$g" ]] || { say "$goldens/$g not found (RP_GOLDEN_DIR: a build's goldens, made by its golden tests)"; exit 1; }
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

def depends(pkgs, recurse=False):
    text = subprocess.run(["apt-cache", "depends", *FLAGS, *(["--recurse"] if recurse else []), *pkgs],
                          capture_output=True, text=True, check=True).stdout
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

graph = {}  # package -> the dependencies followed (apt-cache loads its cache for ~1 s a call: few calls)

def closure(roots):
    graph.update(depends(roots, recurse=True))  # every package any of their dependencies reaches
    seen, todo = set(), list(roots)
    while todo:
        batch = [p for p in dict.fromkeys(todo) if p not in seen]
        todo = []
        if not batch:
            break
        seen.update(batch)
        unknown = [p for p in batch if p not in graph]  # a name the recursion printed otherwise (an arch suffix)
        if unknown:
            graph.update(depends(unknown))
        for p in batch:
            todo.extend(d.split(":")[0] for d in graph.get(p, []))
    return seen

priorities = {}
def priority(pkg):
    return priorities.get(pkg, "optional")

def learn_priorities(pkgs):  # one apt-cache call for all (one per package took minutes)
    text = subprocess.run(["apt-cache", "show", "--no-all-versions", *sorted(pkgs)], capture_output=True,
                          text=True).stdout
    name = None
    for line in text.splitlines():
        if line.startswith("Package:"):
            name = line.split()[1]
        elif line.startswith("Priority:") and name:
            priorities[name] = line.split()[1]

skip = closure(base)
candidates = closure(wanted) - skip - skipped - system
learn_priorities(candidates)
core = ("required", "important")
need = {p for p in candidates if priority(p) not in core + ("standard",)}
need |= set(wanted)
# A dev package's .so links point at its runtime library: that one comes too, even where a C++ build machine
# usually has it (ICU, curl, OpenSSL), or the links dangle under the prefix.
direct = set()
for p in sorted(need):
    direct |= {d.split(":")[0] for d in graph.get(p, [])} - skipped - system
learn_priorities(direct - set(priorities))
need |= {d for d in direct if priority(d) not in core}
open(out, "w").write("\n".join(sorted(need)) + "\n")
PY
mapfile -t packages <"$work/packages.txt"
# The exact files apt would fetch (name_version_arch.deb): those not in the cache are downloaded into it.
mkdir -p "$cache/debs" "$work/carry/debs" "$work/carry/fixtures" "$work/carry/goldens" "$work/carry/wheels"
mapfile -t uris < <(apt-get download --print-uris "${packages[@]}" | awk '{print $2}')
missing=()
for i in "${!uris[@]}"; do [[ -f "$cache/debs/${uris[$i]}" ]] || missing+=("${packages[$i]}"); done
if ((${#missing[@]})); then
  say "downloading ${#missing[@]} of ${#packages[@]} packages into $cache/debs"
  mkdir -p "$work/dl" && chmod 777 "$work/dl"  # writable by apt's sandbox user
  (cd "$work/dl" && fetch "${#missing[@]} Debian package(s)" apt-get download -q "${missing[@]}" >/dev/null)
  mv "$work/dl"/*.deb "$cache/debs/"
fi
for f in "${uris[@]}"; do cp "$cache/debs/$f" "$work/carry/debs/"; done
{
  echo "# roundpipe offline dependencies, made $(date -u +%F) on $(. /etc/os-release && echo "$PRETTY_NAME") ($(dpkg --print-architecture))"
  for deb in "$work"/carry/debs/*.deb; do dpkg-deb -f "$deb" Package Version | sed 's/^[^:]*: //' | paste -sd' '; done
} >"$work/carry/debs/MANIFEST"
for f in "${fixtureFiles[@]}"; do mkdir -p "$work/carry/fixtures/$(dirname "$f")"; cp -r "$fixtures/$f" "$work/carry/fixtures/$f"; done
for g in "${goldenDirs[@]}"; do cp -r "$goldens/$g" "$work/carry/goldens/"; done
mkdir -p "$cache/wheels"
for w in "${wheels[@]}"; do
  ls "$cache/wheels/${w%%==*}-${w##*==}-"*.whl >/dev/null 2>&1 \
    || fetch "the wheel $w" "$pip" download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
         --platform any -d "$cache/wheels" "$w"
  cp "$cache/wheels/${w%%==*}-${w##*==}-"*.whl "$work/carry/wheels/"
done
(cd "$work/carry" && find . -type f ! -name MANIFEST -printf '%s %P\n' | sort -k2 >MANIFEST)
mkdir -p "$(dirname "$out")"
# The .debs are xz inside already and the wheels zip: xz -0 makes 48.58 MB of them where -1 made 48.50, in 6 s
# instead of 16 on 2 cores (2026-11-28; the whole script 15 s instead of 23).
tar -C "$work/carry" -cf - . | xz -0 -T0 >"$out.tmp"
mv "$out.tmp" "$out"
bytes=$(stat -c %s "$out")
mib=$(python3 -c "print(f'{$bytes / 2**20:.1f}')")
say "wrote $out: ${#packages[@]} packages, ${#fixtureFiles[@]} fixtures, ${#goldenDirs[@]} golden(s), ${#wheels[@]} wheels, $mib MiB"
if ((bytes > maxMib * 1048576)); then say "the archive is $mib MiB, over the $maxMib MiB bound"; exit 1; fi
