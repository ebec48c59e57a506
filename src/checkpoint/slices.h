// What a checkpoint holds, torch-free (docs/checkpoint-format.md): element ranges of named tensors, by state
// kind — float32, but the 8-bit moments' codes (uint8). A writer saves the slices it owns; a reader asks for the slices
// it owns under its own layout, whatever layout they were saved with.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace rp::checkpoint {

// The 8-bit moments (optim/blockwise8.h): codes, one byte an element, of the tensor's shape; and absmax, one float32
// a block of 256 elements, as the tensor [ceil(numel / 256)] (blocks counted from the tensor's first element).
enum class Kind {
  kWeights,
  kMaster,
  kExpAvg,
  kExpAvgSq,
  kMaxExpAvgSq,
  kExpAvgCodes,
  kExpAvgSqCodes,
  kExpAvgAbsmax,
  kExpAvgSqAbsmax
};
inline constexpr Kind kAllKinds[] = {Kind::kWeights,       Kind::kMaster,       Kind::kExpAvg,
                                     Kind::kExpAvgSq,      Kind::kMaxExpAvgSq,  Kind::kExpAvgCodes,
                                     Kind::kExpAvgSqCodes, Kind::kExpAvgAbsmax, Kind::kExpAvgSqAbsmax};
const char* kindName(Kind kind);  // the HDF5 group: "weights", "master", ...
// Bytes an element of the kind: 1 for codes, 4 for the float32 kinds.
std::size_t elementBytes(Kind kind);
Kind parseKind(const std::string& name, const std::string& where);
// The /weights slice name of the weights the iteration `ahead` after the checkpoint uploads: the tensor's own
// name for the next one, "<name>@+<ahead>" for later ones (the pipeline's async staleness k >= 2 keeps k).
std::string weightsAhead(const std::string& tensor, int ahead);

// Elements [offset, offset + count) of the row-major flattened tensor `tensor` of shape `shape`.
struct Slice {
  Kind kind = Kind::kWeights;
  std::string tensor;
  std::vector<std::int64_t> shape;
  std::int64_t offset = 0;
  std::int64_t count = 0;
  void* data = nullptr;  // `count` elements (elementBytes(kind) each): written from, or read into
};

// A saved slice, as listed in the manifest.
struct SliceRecord {
  Kind kind = Kind::kWeights;
  std::string tensor;
  std::vector<std::int64_t> shape;
  std::string file;  // shard file name inside the checkpoint directory
  std::int64_t offset = 0;
  std::int64_t count = 0;
  std::uint32_t crc32 = 0;  // of the dataset's raw little-endian bytes
  bool operator==(const SliceRecord&) const = default;
};

// A shard file as written: its size and the crc32 of all its bytes, kept in the manifest so that a damaged
// file is rejected before HDF5 parses it (HDF5's own parser is not safe against corrupt files).
struct FileRecord {
  std::string name;  // inside the checkpoint directory
  std::int64_t bytes = 0;
  std::uint32_t crc32 = 0;
  bool operator==(const FileRecord&) const = default;
};

std::int64_t numel(const std::vector<std::int64_t>& shape);
std::uint32_t crc32(const void* data, std::size_t bytes);
// The crc32 of the bytes so far (`previous`, 0 for none) followed by these.
std::uint32_t crc32Update(std::uint32_t previous, const void* data, std::size_t bytes);

}  // namespace rp::checkpoint
