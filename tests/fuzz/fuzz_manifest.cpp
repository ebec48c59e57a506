// A checkpoint's manifest.json (checkpoint/manifest.h): format, version, fields, slice coverage.
#include "checkpoint/manifest.h"
#include "fuzz_target.h"

namespace rp::fuzz {

void fuzzOne(std::string_view data) {
  writeScratch("manifest.json", data);
  (void)checkpoint::readManifest(scratchDir());
}

void writeSeeds(const std::string& dir) {
  checkpoint::Manifest m;
  m.step = 12;
  m.writers = 2;
  m.model = {{"path", "m"}, {"type", "LlamaForCausalLM"}, {"dtype", "float32"}};
  m.lora = nullptr;
  m.training = {{"tokens", 4096}, {"cursor", {{"epoch", 0}, {"row", 3}}}};
  m.runConfig = "[model]\npath = \"m\"\n";
  for (const auto kind : {checkpoint::Kind::kMaster, checkpoint::Kind::kExpAvg, checkpoint::Kind::kExpAvgSq}) {
    m.slices.push_back({kind, "w", {2, 3}, "rank0.h5", 0, 4, 0x1234});
    m.slices.push_back({kind, "w", {2, 3}, "rank1.h5", 4, 2, 0x5678});
  }
  writeSeed(dir, "manifest.json", checkpoint::toJson(m).dump(1));
}

}  // namespace rp::fuzz
