# Sourced first thing by a test script that fills a disk (no arguments: the script's own stay in "$@"): the script
# runs again in a private mount namespace, so the tmpfs cannot outlive it. tmpfs_disk <size> then makes $work (a
# scratch directory) and mounts a tmpfs of <size> at $disk = $work/disk, both gone at exit; where it cannot mount
# (not root), the script is skipped (exit 77).
if [[ -z "${RP_IN_MOUNT_NS:-}" ]] && command -v unshare >/dev/null && unshare -m --propagation private true 2>/dev/null; then
  RP_IN_MOUNT_NS=1 exec unshare -m --propagation private "$0" "$@"
fi
tmpfs_disk() {
  work="$(mktemp -d)"
  disk="$work/disk"
  mkdir -p "$disk"
  if ! mount -t tmpfs -o "size=$1" tmpfs "$disk" 2>/dev/null; then
    echo "SKIP: cannot mount a tmpfs (needs root)"
    rm -rf "$work"
    exit 77
  fi
  trap 'umount "$disk"; rm -rf "$work"' EXIT
}
