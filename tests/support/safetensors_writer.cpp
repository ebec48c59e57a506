#include "support/safetensors_writer.h"

#include <cstring>
#include <fstream>

namespace rp::test {

void writeRawSafetensors(const std::string& path, const nlohmann::json& header, const std::vector<std::uint8_t>& data,
                         std::int64_t headerLengthOverride) {
  const std::string text = header.dump();
  const std::uint64_t length =
      headerLengthOverride >= 0 ? static_cast<std::uint64_t>(headerLengthOverride) : text.size();
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  char bytes[8];
  std::memcpy(bytes, &length, 8);
  out.write(bytes, 8);
  out.write(text.data(), static_cast<std::streamsize>(text.size()));
  out.write(reinterpret_cast<const char*>(data.data()), static_cast<std::streamsize>(data.size()));
}

void writeFloatSafetensors(const std::string& path, const std::vector<FloatTensor>& tensors,
                           const nlohmann::json& metadata) {
  nlohmann::json header = nlohmann::json::object();
  if (!metadata.empty()) header["__metadata__"] = metadata;
  std::vector<std::uint8_t> data;
  for (const auto& t : tensors) {
    const std::size_t begin = data.size();
    data.resize(begin + t.values.size() * sizeof(float));
    std::memcpy(data.data() + begin, t.values.data(), t.values.size() * sizeof(float));
    header[t.name] = {{"dtype", "F32"}, {"shape", t.shape}, {"data_offsets", {begin, data.size()}}};
  }
  writeRawSafetensors(path, header, data);
}

}  // namespace rp::test
