// The memory report (docs/metrics.md, "Memory"): per rank at the end of a run, its resident peak and, of it,
// what is shared (the node store) and what is private — the number RoundPipe keeps small: a worker holds its
// stage slots, the compute's activations and gradients, its share of the optimizer state, and nothing of the
// model besides. Measured when training ends (before the final checkpoint stages its copy of the state);
// printed after the bubble report and written to <output.dir>/memory.json.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "common/resident_memory.h"

namespace rp::trace {

struct RankMemory {
  int rank = 0;
  ResidentMemory resident;
  std::int64_t slotBytes = 0;           // the two stage slots of its worker
  std::int64_t optimizerBytes = 0;      // its share of the optimizer state: float32 gradient slices, AdamW moments
  std::int64_t deviceJobPeakBytes = 0;  // GPU: the most any one stage job's compute allocated (0 on the CPU)
  std::int64_t uploadedBytes = 0;       // the weight bytes its worker uploaded from the store, over the run
};

std::string memoryTable(const std::vector<RankMemory>& ranks, std::int64_t storeBytes);
// Writes memory.json with the device the workers ran on (metrics rows' label: an emulated device's GPU job peak is
// its model's count, docs/emulated.md); throws SystemError naming the file when it cannot.
void writeMemoryReport(const std::string& path, const std::vector<RankMemory>& ranks, std::int64_t storeBytes,
                       const std::string& device);

}  // namespace rp::trace
