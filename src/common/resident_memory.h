// This process's resident memory as Linux accounts it (/proc/self/status), for the memory report
// (docs/metrics.md, "Memory") and memory tests: the peak (VmHWM) and, of what is resident now, the node-shared
// part (shared-memory pages: the node store) and the file-backed part (mapped libraries and checkpoints).
// Linux only; elsewhere every field reads 0.
#pragma once

#include <cstdint>
#include <string>

namespace rp {

struct ResidentMemory {
  std::int64_t peakBytes = 0;    // VmHWM: the most this process had resident, since start or the last reset
  std::int64_t bytes = 0;        // VmRSS
  std::int64_t anonBytes = 0;    // RssAnon: private memory (heap, LibTorch tensors, worker slots)
  std::int64_t fileBytes = 0;    // RssFile
  std::int64_t sharedBytes = 0;  // RssShmem: POSIX shared memory (the node store, the tensor arena)
  // The private peak: the peak less what is shared or file-backed now (those pages only grow in a run).
  std::int64_t privatePeakBytes() const;
};

ResidentMemory readResidentMemory();

// Restarts the peak at the current resident size (writes "5" to /proc/self/clear_refs); false where the
// kernel refuses.
bool resetResidentPeak();

// What this host can still give a run, and where the number comes from: MemAvailable (/proc/meminfo), or less
// where the container's cgroup limit (v2 memory.max, v1 memory.limit_in_bytes, less current usage) is lower;
// RP_HOST_MEMORY_MB overrides both (tests). 0 bytes = unknown.
struct HostMemory {
  std::int64_t availableBytes = 0;
  std::string source;
};
HostMemory availableHostMemory();

}  // namespace rp
