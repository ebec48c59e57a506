// safetensors files (model/safetensors.h): the 8-byte length, the JSON header, dtypes, shapes, offsets.
#include <cstring>

#include "fuzz_target.h"
#include "model/safetensors.h"
#include "model/safetensors_writer.h"

namespace rp::fuzz {

void fuzzOne(std::string_view data) {
  const safetensors::SafetensorsFile file(writeScratch("model.safetensors", data));
  for (const auto& t : file.tensors()) {
    if (t.nbytes > 0) (void)std::memchr(t.data, 0x7f, t.nbytes);  // every byte the header promises is readable
  }
}

void writeSeeds(const std::string& dir) {
  const float weights[6] = {1, 2, 3, 4, 5, 6};
  const std::uint16_t halves[2] = {0x3c00, 0xc000};
  safetensors::writeFile(dir + "/two.safetensors", {{"a.weight", safetensors::DType::kF32, {2, 3}, weights},
                                                    {"b", safetensors::DType::kBF16, {2}, halves},
                                                    {"scalar", safetensors::DType::kF32, {}, weights}});
  safetensors::writeFile(dir + "/aliased.safetensors", {{"lm_head.weight", safetensors::DType::kF16, {1, 2}, halves}},
                         {{"format", "pt"}, {"embed.weight", "lm_head.weight"}});
}

}  // namespace rp::fuzz
