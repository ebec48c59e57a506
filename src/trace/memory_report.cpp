#include "trace/memory_report.h"

#include <fstream>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "common/error.h"
#include "trace/formats.h"

namespace rp::trace {
namespace {

double mb(std::int64_t bytes) {
  return static_cast<double>(bytes) / 1e6;
}

}  // namespace

std::string memoryTable(const std::vector<RankMemory>& ranks, std::int64_t storeBytes) {
  std::string out =
      fmt::format("{:>4} {:>10} {:>12} {:>13} {:>10} {:>12} {:>14} {:>18} {:>13}\n", "rank", "peak MB", "private MB",
                  "shared MB", "files MB", "slots MB", "optimizer MB", "GPU job peak MB", "uploaded MB");
  for (const auto& r : ranks) {
    out += fmt::format("{:>4} {:>10.1f} {:>12.1f} {:>13.1f} {:>10.1f} {:>12.1f} {:>14.1f} {:>18} {:>13.1f}\n", r.rank,
                       mb(r.resident.peakBytes), mb(r.resident.privatePeakBytes()), mb(r.resident.sharedBytes),
                       mb(r.resident.fileBytes), mb(r.slotBytes), mb(r.optimizerBytes),
                       r.deviceJobPeakBytes > 0 ? fmt::format("{:.1f}", mb(r.deviceJobPeakBytes)) : "-",
                       mb(r.uploadedBytes));
  }
  out += fmt::format(
      "node store {:.1f} MB, shared by the node's ranks (private = peak - shared - files; shared: the store and the "
      "tensor plane's arena)",
      mb(storeBytes));
  return out;
}

void writeMemoryReport(const std::string& path, const std::vector<RankMemory>& ranks, std::int64_t storeBytes,
                       const std::string& device) {
  nlohmann::json rows = nlohmann::json::array();
  for (const auto& r : ranks) {
    rows.push_back({{"rank", r.rank},
                    {"peak_mb", mb(r.resident.peakBytes)},
                    {"private_peak_mb", mb(r.resident.privatePeakBytes())},
                    {"shared_mb", mb(r.resident.sharedBytes)},
                    {"files_mb", mb(r.resident.fileBytes)},
                    {"stage_slots_mb", mb(r.slotBytes)},
                    {"optimizer_mb", mb(r.optimizerBytes)},
                    {"gpu_job_peak_mb", mb(r.deviceJobPeakBytes)},
                    {"uploaded_mb", mb(r.uploadedBytes)}});
  }
  std::ofstream out(path);
  nlohmann::json report{{"device", device}, {"node_store_mb", mb(storeBytes)}, {"ranks", rows}};
  if (modelledDevice(device)) report["modelled"] = "gpu_job_peak_mb: the emulated device's count";
  out << report.dump(2) << '\n';
  out.flush();
  if (!out) RP_THROW(SystemError, "{}: cannot write the memory report", path);
}

}  // namespace rp::trace
