// Writes safetensors files byte by byte for tests, including deliberately broken ones. Independent of
// the reader under test: the header is built from JSON the test controls.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace rp::test {

// <8-byte little-endian header length><header JSON><data>. `headerLengthOverride` >= 0 writes that
// length instead of the true one (a lying header).
void writeRawSafetensors(const std::string& path, const nlohmann::json& header, const std::vector<std::uint8_t>& data,
                         std::int64_t headerLengthOverride = -1);

// A valid file with float32 tensors laid out back to back, in the given order.
struct FloatTensor {
  std::string name;
  std::vector<std::int64_t> shape;
  std::vector<float> values;
};
void writeFloatSafetensors(const std::string& path, const std::vector<FloatTensor>& tensors,
                           const nlohmann::json& metadata = nlohmann::json::object());

}  // namespace rp::test
