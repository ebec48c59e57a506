#include "common/resident_memory.h"

#include "common/env.h"

#include <algorithm>
#include <fstream>
#include <optional>
#include <string>

namespace rp {

std::int64_t ResidentMemory::privatePeakBytes() const {
  return std::max<std::int64_t>(0, peakBytes - sharedBytes - fileBytes);
}

ResidentMemory readResidentMemory() {
  ResidentMemory m;
  std::ifstream in("/proc/self/status");
  std::string key;
  std::int64_t kb = 0;
  std::string unit;
  while (in >> key) {
    std::int64_t* field = key == "VmHWM:"      ? &m.peakBytes
                          : key == "VmRSS:"    ? &m.bytes
                          : key == "RssAnon:"  ? &m.anonBytes
                          : key == "RssFile:"  ? &m.fileBytes
                          : key == "RssShmem:" ? &m.sharedBytes
                                               : nullptr;
    if (field != nullptr && in >> kb >> unit) *field = kb * 1024;
    in.ignore(1 << 16, '\n');
  }
  return m;
}

bool resetResidentPeak() {
  std::ofstream out("/proc/self/clear_refs");
  out << "5";
  out.flush();
  return static_cast<bool>(out);
}

namespace {

// A number of bytes from a one-line file; nullopt when absent or not a number ("max": no limit).
std::optional<std::int64_t> readBytes(const char* path) {
  std::ifstream in(path);
  std::int64_t v = 0;
  if (!(in >> v)) return std::nullopt;
  return v;
}

}  // namespace

HostMemory availableHostMemory() {
  if (const long mb = env::getInt(env::kHostMemoryMb); mb > 0) {
    return {static_cast<std::int64_t>(mb) * 1024 * 1024, "RP_HOST_MEMORY_MB"};
  }
  HostMemory out;
  std::ifstream in("/proc/meminfo");
  std::string key;
  std::int64_t kb = 0;
  while (in >> key) {
    if (key == "MemAvailable:" && in >> kb) out = {kb * 1024, "MemAvailable in /proc/meminfo"};
    in.ignore(1 << 16, '\n');
  }
  struct Limit {
    const char *max, *current, *name;
  };
  for (const Limit& l : {Limit{"/sys/fs/cgroup/memory.max", "/sys/fs/cgroup/memory.current", "cgroup memory.max"},
                         Limit{"/sys/fs/cgroup/memory/memory.limit_in_bytes",
                               "/sys/fs/cgroup/memory/memory.usage_in_bytes", "cgroup memory.limit_in_bytes"}}) {
    const auto max = readBytes(l.max), current = readBytes(l.current);
    if (!max || !current) continue;
    const std::int64_t left = std::max<std::int64_t>(0, *max - *current);
    if (out.availableBytes == 0 || left < out.availableBytes) out = {left, std::string(l.name) + " less usage"};
  }
  return out;
}

}  // namespace rp
