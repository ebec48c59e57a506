#include "model/safetensors_writer.h"

#include <cerrno>
#include <cstring>
#include <fstream>

#include <nlohmann/json.hpp>

#include "common/error.h"

namespace rp::safetensors {

std::size_t byteSize(const OutTensor& t) {
  std::size_t n = dtypeSize(t.dtype);
  for (auto d : t.shape) n *= static_cast<std::size_t>(d);
  return n;
}

void writeFile(const std::string& path, const std::vector<OutTensor>& tensors,
               const std::map<std::string, std::string>& metadata) {
  nlohmann::ordered_json header;
  if (!metadata.empty()) header["__metadata__"] = metadata;
  std::size_t offset = 0;
  for (const auto& t : tensors) {
    const std::size_t n = byteSize(t);
    header[t.name] = {{"dtype", dtypeName(t.dtype)}, {"shape", t.shape}, {"data_offsets", {offset, offset + n}}};
    offset += n;
  }
  std::string text = header.dump();
  text.append((8 - text.size() % 8) % 8, ' ');
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  const std::uint64_t length = text.size();
  unsigned char le[8];
  for (int i = 0; i < 8; ++i) le[i] = static_cast<unsigned char>(length >> (8 * i));
  out.write(reinterpret_cast<const char*>(le), 8);
  out.write(text.data(), static_cast<std::streamsize>(text.size()));
  for (const auto& t : tensors) out.write(static_cast<const char*>(t.data), static_cast<std::streamsize>(byteSize(t)));
  out.flush();
  if (!out) RP_THROW(SystemError, "{}: write failed ({})", path, std::strerror(errno));
}

}  // namespace rp::safetensors
