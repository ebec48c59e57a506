// Names of the node-store regions and small helpers shared by the runtime's files (runtime.cpp,
// stage_jobs.cpp). Internal to engine/.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "model/layers.h"

namespace rp::engine::detail {

inline std::string weightRegion(const std::string& name) {
  return "w/" + name;
}
inline std::string gradRegion(const std::string& name, int layer) {
  return fmt::format("g/{}@{}", name, layer);
}
inline std::string masterRegion(const std::string& name) {
  return "m/" + name;
}
inline std::string lossRegion(std::int64_t step) {
  return fmt::format("loss/{}", step % 2);
}
// Per-layer times of an iteration: negative = not measured by this rank (the coordinator then takes the
// other ranks' measurements, or keeps its estimate).
inline constexpr double kNotMeasured = -1.0;
inline void addMs(double& slot, double ms) {
  slot = (slot < 0 ? 0.0 : slot) + ms;
}
// Splits `totalMs` over layers [a, b) in proportion to `weights` and adds it to `into`.
inline void spread(double totalMs, int a, int b, const std::vector<double>& weights, std::vector<double>& into) {
  double sum = 0.0;
  for (int l = a; l < b; ++l) sum += weights[static_cast<std::size_t>(l)];
  for (int l = a; l < b; ++l) {
    const double share = sum > 0 ? weights[static_cast<std::size_t>(l)] / sum : 1.0 / (b - a);
    addMs(into[static_cast<std::size_t>(l)], totalMs * share);
  }
}

}  // namespace rp::engine::detail
