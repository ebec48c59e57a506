// Writing Hugging Face safetensors files (the format safetensors.h reads), torch-free: 8-byte little-endian
// header length, the JSON header (padded with spaces to a multiple of 8 bytes), then the tensors' bytes in
// header order. Used by roundpipe_export and by tests that hand data to Python.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "model/safetensors.h"

namespace rp::safetensors {

struct OutTensor {
  std::string name;
  DType dtype = DType::kF32;
  std::vector<std::int64_t> shape;
  const void* data = nullptr;  // numel(shape) * dtypeSize(dtype) bytes, little-endian
};

// Writes `path` (replacing it); throws SystemError naming the file on a write error.
void writeFile(const std::string& path, const std::vector<OutTensor>& tensors,
               const std::map<std::string, std::string>& metadata = {{"format", "pt"}});

// Bytes the tensor takes in a file.
std::size_t byteSize(const OutTensor& tensor);

}  // namespace rp::safetensors
