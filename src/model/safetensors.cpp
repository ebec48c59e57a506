#include "model/safetensors.h"

#include <algorithm>
#include <array>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>

#include <nlohmann/json.hpp>

#include "common/error.h"

namespace rp::safetensors {
namespace {

struct DTypeInfo {
  DType dtype;
  const char* name;
  std::size_t size;
};

constexpr std::array<DTypeInfo, 12> kDTypes{{
    {DType::kF64, "F64", 8},
    {DType::kF32, "F32", 4},
    {DType::kF16, "F16", 2},
    {DType::kBF16, "BF16", 2},
    {DType::kI64, "I64", 8},
    {DType::kI32, "I32", 4},
    {DType::kI16, "I16", 2},
    {DType::kI8, "I8", 1},
    {DType::kU8, "U8", 1},
    {DType::kBool, "BOOL", 1},
    {DType::kF8E4M3, "F8_E4M3", 1},
    {DType::kF8E5M2, "F8_E5M2", 1},
}};

const DTypeInfo& info(DType dtype) {
  for (const auto& entry : kDTypes) {
    if (entry.dtype == dtype) return entry;
  }
  RP_CHECK(false, "dtype {} missing from the dtype table", static_cast<int>(dtype));
}

std::string formatShape(const std::vector<std::int64_t>& shape) {
  return fmt::format("[{}]", fmt::join(shape, ", "));
}

TensorView parseEntry(const std::string& path, const std::string& name, const nlohmann::json& entry,
                      std::size_t dataSize) {
  if (!entry.is_object()) RP_THROW(InputError, "{}: tensor '{}': header entry is not an object", path, name);
  TensorView view;
  view.name = name;
  const auto dtypeIt = entry.find("dtype");
  if (dtypeIt == entry.end() || !dtypeIt->is_string()) {
    RP_THROW(InputError, "{}: tensor '{}': missing string field 'dtype'", path, name);
  }
  const auto dtype = parseDType(dtypeIt->get<std::string>());
  if (!dtype) {
    RP_THROW(InputError,
             "{}: tensor '{}': unknown dtype '{}' (expected one of F64, F32, F16, BF16, I64, I32, I16, "
             "I8, U8, BOOL, F8_E4M3, F8_E5M2)",
             path, name, dtypeIt->get<std::string>());
  }
  view.dtype = *dtype;

  const auto shapeIt = entry.find("shape");
  if (shapeIt == entry.end() || !shapeIt->is_array()) {
    RP_THROW(InputError, "{}: tensor '{}': missing array field 'shape'", path, name);
  }
  std::uint64_t numel = 1;
  for (const auto& dim : *shapeIt) {
    if (!dim.is_number_unsigned()) {
      RP_THROW(InputError, "{}: tensor '{}': shape {} has an entry that is not a non-negative integer", path, name,
               shapeIt->dump());
    }
    const auto value = dim.get<std::uint64_t>();
    if (value != 0 && numel > std::numeric_limits<std::uint64_t>::max() / value) {
      RP_THROW(InputError, "{}: tensor '{}': shape {} overflows", path, name, shapeIt->dump());
    }
    numel *= value;
    view.shape.push_back(static_cast<std::int64_t>(value));
  }

  const auto offsetsIt = entry.find("data_offsets");
  if (offsetsIt == entry.end() || !offsetsIt->is_array() || offsetsIt->size() != 2 ||
      !(*offsetsIt)[0].is_number_unsigned() || !(*offsetsIt)[1].is_number_unsigned()) {
    RP_THROW(InputError, "{}: tensor '{}': 'data_offsets' must be [begin, end] with non-negative integers", path, name);
  }
  const auto begin = (*offsetsIt)[0].get<std::uint64_t>();
  const auto end = (*offsetsIt)[1].get<std::uint64_t>();
  if (begin > end) {
    RP_THROW(InputError, "{}: tensor '{}': data_offsets [{}, {}] end before they begin", path, name, begin, end);
  }
  if (end > dataSize) {
    RP_THROW(InputError,
             "{}: tensor '{}': data_offsets [{}, {}] run past the data section of {} bytes "
             "(truncated file or lying header)",
             path, name, begin, end, dataSize);
  }
  const std::uint64_t expected = numel * info(view.dtype).size;
  if (end - begin != expected) {
    RP_THROW(InputError, "{}: tensor '{}': data_offsets [{}, {}] span {} bytes but {} {} needs {}", path, name, begin,
             end, end - begin, dtypeName(view.dtype), formatShape(view.shape), expected);
  }
  view.nbytes = static_cast<std::size_t>(expected);
  view.data = reinterpret_cast<const std::uint8_t*>(static_cast<std::uintptr_t>(begin));  // rebased by the caller
  return view;
}

}  // namespace

std::optional<DType> parseDType(const std::string& name) {
  for (const auto& entry : kDTypes) {
    if (name == entry.name) return entry.dtype;
  }
  return std::nullopt;
}

const char* dtypeName(DType dtype) {
  return info(dtype).name;
}
std::size_t dtypeSize(DType dtype) {
  return info(dtype).size;
}

std::int64_t TensorView::numel() const {
  std::int64_t n = 1;
  for (auto d : shape) n *= d;
  return n;
}

SafetensorsFile::SafetensorsFile(const std::string& path) : file_(path) {
  const std::size_t size = file_.size();
  if (size < 8) {
    RP_THROW(InputError, "{}: file is {} bytes, too short for the 8-byte header length (truncated?)", path, size);
  }
  std::uint64_t headerLength = 0;
  std::memcpy(&headerLength, file_.data(), 8);  // little-endian, as is every host we build for
  if (headerLength > size - 8) {
    RP_THROW(InputError,
             "{}: header length {} exceeds the {} bytes that follow it (truncated file or not a "
             "safetensors file)",
             path, headerLength, size - 8);
  }
  const char* headerBegin = reinterpret_cast<const char*>(file_.data() + 8);
  nlohmann::json header;
  try {
    header = nlohmann::json::parse(headerBegin, headerBegin + headerLength);
  } catch (const nlohmann::json::exception& e) {
    RP_THROW(InputError, "{}: header is not valid JSON: {}", path, e.what());
  }
  if (!header.is_object()) RP_THROW(InputError, "{}: header is not a JSON object", path);

  const std::uint8_t* dataBegin = file_.data() + 8 + headerLength;
  const std::size_t dataSize = size - 8 - static_cast<std::size_t>(headerLength);
  for (const auto& [name, entry] : header.items()) {
    if (name == "__metadata__") {
      if (!entry.is_object()) RP_THROW(InputError, "{}: __metadata__ is not an object", path);
      for (const auto& [key, value] : entry.items()) {
        if (!value.is_string()) RP_THROW(InputError, "{}: __metadata__ value of '{}' is not a string", path, key);
        metadata_[key] = value.get<std::string>();
      }
      continue;
    }
    TensorView view = parseEntry(path, name, entry, dataSize);
    view.data = dataBegin + reinterpret_cast<std::uintptr_t>(view.data);
    view.file = &file_.path();
    tensors_.push_back(std::move(view));
  }

  std::vector<const TensorView*> byOffset;
  for (const auto& view : tensors_) byOffset.push_back(&view);
  std::sort(byOffset.begin(), byOffset.end(), [](auto* a, auto* b) { return a->data < b->data; });
  for (std::size_t i = 1; i < byOffset.size(); ++i) {
    const TensorView* prev = byOffset[i - 1];
    if (prev->data + prev->nbytes > byOffset[i]->data) {
      RP_THROW(InputError, "{}: tensors '{}' and '{}' overlap in the data section", path, prev->name,
               byOffset[i]->name);
    }
  }
  for (std::size_t i = 0; i < tensors_.size(); ++i) byName_[tensors_[i].name] = i;
}

const TensorView* SafetensorsFile::find(const std::string& name) const {
  const auto it = byName_.find(name);
  return it == byName_.end() ? nullptr : &tensors_[it->second];
}

CheckpointReader::CheckpointReader(const std::string& directory) : directory_(directory) {
  namespace fs = std::filesystem;
  const fs::path dir(directory);
  if (!fs::is_directory(dir))
    RP_THROW(InputError, "{}: not a directory (expected a Hugging Face model directory)", directory);

  std::vector<std::string> shardNames;
  const fs::path index = dir / "model.safetensors.index.json";
  if (fs::exists(index)) {
    std::ifstream in(index);
    nlohmann::json json;
    try {
      json = nlohmann::json::parse(in);
    } catch (const nlohmann::json::exception& e) {
      RP_THROW(InputError, "{}: not valid JSON: {}", index.string(), e.what());
    }
    const auto mapIt = json.find("weight_map");
    if (mapIt == json.end() || !mapIt->is_object()) {
      RP_THROW(InputError, "{}: missing object field 'weight_map'", index.string());
    }
    for (const auto& [name, shard] : mapIt->items()) {
      if (!shard.is_string()) RP_THROW(InputError, "{}: weight_map['{}'] is not a file name", index.string(), name);
      const auto file = shard.get<std::string>();
      if (std::find(shardNames.begin(), shardNames.end(), file) == shardNames.end()) shardNames.push_back(file);
    }
  } else if (fs::exists(dir / "model.safetensors")) {
    shardNames.push_back("model.safetensors");
  } else {
    RP_THROW(InputError, "{}: neither model.safetensors nor model.safetensors.index.json found", directory);
  }

  for (const auto& shard : shardNames) {
    files_.push_back(std::make_unique<SafetensorsFile>((dir / shard).string()));
    const SafetensorsFile& file = *files_.back();
    for (const auto& view : file.tensors()) {
      const auto [it, inserted] = byName_.emplace(view.name, &view);
      if (!inserted) {
        RP_THROW(InputError, "{}: tensor '{}' is stored twice ({} and {})", directory, view.name, *it->second->file,
                 file.path());
      }
    }
    for (const auto& [key, value] : file.metadata()) {
      if (key != "format") aliases_[key] = value;
    }
  }
}

const TensorView* CheckpointReader::find(const std::string& name) const {
  if (auto it = byName_.find(name); it != byName_.end()) return it->second;
  if (auto alias = aliases_.find(name); alias != aliases_.end()) {
    if (auto it = byName_.find(alias->second); it != byName_.end()) return it->second;
  }
  return nullptr;
}

const TensorView& CheckpointReader::get(const std::string& name) const {
  if (const TensorView* view = find(name)) return *view;
  RP_THROW(InputError, "{}: tensor '{}' is missing from the checkpoint ({} tensors stored)", directory_, name,
           byName_.size());
}

std::vector<std::string> CheckpointReader::names() const {
  std::vector<std::string> out;
  for (const auto& [name, view] : byName_) out.push_back(name);
  return out;
}

}  // namespace rp::safetensors
