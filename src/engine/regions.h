// Names of the node-store regions and small helpers shared by the runtime's files (runtime.cpp,
// job_executor.cpp, job_store_copies.cpp). Internal to engine/.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "model/layers.h"

namespace rp::engine::detail {

// Version v of a tensor's weights and gradient slots (Note [Layer fences]: staleness k >= 2 keeps k of them).
inline std::string weightRegion(const std::string& name, int version = 0) {
  return version == 0 ? "w/" + name : fmt::format("w{}/{}", version, name);
}
inline std::string gradRegion(const std::string& name, int layer, int version = 0) {
  return version == 0 ? fmt::format("g/{}@{}", name, layer) : fmt::format("g{}/{}@{}", version, name, layer);
}
inline std::string masterRegion(const std::string& name) {
  return "m/" + name;
}
// The per-microbatch loss sums of iteration `step`, on one of `buffers` (= versions + 1).
inline std::string lossRegion(std::int64_t step, int buffers) {
  return fmt::format("loss/{}", step % buffers);
}
// The MoE router statistics of iteration `step` (engine/router_board.h), on one of `buffers` like the losses.
inline std::string routerRegion(std::int64_t step, int buffers) {
  return fmt::format("router/{}", step % buffers);
}
// The MoE routing recorded in the forward passes of iteration `step` (engine/routing_tape.h), likewise.
inline std::string routingRegion(std::int64_t step, int buffers) {
  return fmt::format("routing/{}", step % buffers);
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
