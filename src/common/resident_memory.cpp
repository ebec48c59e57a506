#include "common/resident_memory.h"

#include <algorithm>
#include <fstream>
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

}  // namespace rp
