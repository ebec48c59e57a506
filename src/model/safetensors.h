// Reading Hugging Face safetensors files and sharded checkpoints, torch-free.
// Format: 8-byte little-endian header length N, N bytes of JSON header, then the data section.
// Every structural problem is an InputError naming the file and, where there is one, the tensor.
// Thread-safety: immutable after construction; concurrent readers are fine.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "common/mapped_file.h"

namespace rp::safetensors {

enum class DType { kF64, kF32, kF16, kBF16, kI64, kI32, kI16, kI8, kU8, kBool, kF8E4M3, kF8E5M2 };

std::optional<DType> parseDType(const std::string& name);
const char* dtypeName(DType dtype);
std::size_t dtypeSize(DType dtype);

// A tensor inside a mapped file. `data` stays valid while its SafetensorsFile lives.
struct TensorView {
  std::string name;
  DType dtype = DType::kF32;
  std::vector<std::int64_t> shape;
  const std::uint8_t* data = nullptr;
  std::size_t nbytes = 0;
  const std::string* file = nullptr;  // path of the file holding it

  std::int64_t numel() const;
};

class SafetensorsFile {
 public:
  // Maps and validates the whole header: lengths, dtypes, shapes vs byte sizes, bounds, overlaps.
  explicit SafetensorsFile(const std::string& path);

  const std::string& path() const { return file_.path(); }
  const std::vector<TensorView>& tensors() const { return tensors_; }
  const std::map<std::string, std::string>& metadata() const { return metadata_; }
  const TensorView* find(const std::string& name) const;

 private:
  MappedFile file_;
  std::vector<TensorView> tensors_;
  std::map<std::string, std::size_t> byName_;
  std::map<std::string, std::string> metadata_;
};

// A Hugging Face model directory: `model.safetensors`, or shards listed by `model.safetensors.index.json`.
// Names aliased in a file's `__metadata__` (name -> stored name, as written for tied weights) resolve too.
class CheckpointReader {
 public:
  explicit CheckpointReader(const std::string& directory);

  const std::string& directory() const { return directory_; }
  // nullptr when absent.
  const TensorView* find(const std::string& name) const;
  // Throws InputError naming the directory when absent.
  const TensorView& get(const std::string& name) const;
  // Every stored tensor name (aliases excluded), sorted.
  std::vector<std::string> names() const;

 private:
  std::string directory_;
  std::vector<std::unique_ptr<SafetensorsFile>> files_;
  std::map<std::string, const TensorView*> byName_;
  std::map<std::string, std::string> aliases_;  // alias -> stored name
};

}  // namespace rp::safetensors
