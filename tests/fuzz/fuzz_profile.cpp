// profile.json (trace/formats.h): the per-layer times a run writes and the simulator and planner read.
#include "fuzz_target.h"
#include "trace/formats.h"

namespace rp::fuzz {

void fuzzOne(std::string_view data) {
  (void)trace::readLayerProfile(writeScratch("profile.json", data));
}

void writeSeeds(const std::string& dir) {
  trace::LayerProfileFile p;
  p.forwardMs = {0.5, 1.0, 1.0, 2.5};
  p.backwardMs = {1.0, 2.0, 2.0, 5.0};
  p.plan = "1,1 | 1 | 1,1";
  p.microbatches = 4;
  const std::string path = scratchDir() + "/seed-profile.json";
  trace::writeLayerProfile(path, p);
  writeSeed(dir, "profile.json", readFile(path));
}

}  // namespace rp::fuzz
