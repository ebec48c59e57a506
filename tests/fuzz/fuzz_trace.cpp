// A run's trace.json as `roundpipe_sim --trace` replays it (schedule/trace_replay.h): Chrome trace events,
// compute span names, the plan they describe.
#include <tuple>

#include <nlohmann/json.hpp>

#include "fuzz_target.h"
#include "schedule/trace_replay.h"
#include "trace/formats.h"

namespace rp::fuzz {

void fuzzOne(std::string_view data) {
  (void)schedule::loadTrace(writeScratch("trace.json", data), 0.1);
}

// Two workers, 4 layers (forward 0-1, fused 2-3, backward 0-1), steps 3 and 4, two microbatches.
void writeSeeds(const std::string& dir) {
  nlohmann::json events = nlohmann::json::array();
  double ts = 0;
  for (std::int64_t step = 3; step <= 4; ++step) {
    for (int mb = 0; mb < 2; ++mb) {
      for (const auto& [kind, first, last] : {std::tuple{"fwd", 0, 1}, {"fused", 2, 3}, {"bwd", 0, 1}}) {
        const std::string name = trace::computeSpanName({kind, first, last, mb, step});
        events.push_back({{"name", name},
                          {"cat", "compute"},
                          {"ph", "X"},
                          {"pid", mb % 2},
                          {"tid", 0},
                          {"ts", ts},
                          {"dur", 1000.0}});
        ts += 1000;
      }
    }
  }
  writeSeed(dir, "trace.json", nlohmann::json{{"traceEvents", events}}.dump());
}

}  // namespace rp::fuzz
