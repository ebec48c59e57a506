// One writer's HDF5 shard file (docs/checkpoint-format.md, "Shard files"): a group per state kind, a 1-D
// float32 (uint8 for 8-bit codes) dataset per slice with its tensor name, full shape, offset and count as attributes.
#pragma once

#include <filesystem>
#include <vector>

#include "checkpoint/slices.h"

namespace rp::checkpoint {

// Writes `slices` into `path` (created; must not exist), flushes and fsyncs it; returns their records
// (file = path's file name). Throws SystemError naming the path on any write error (e.g. disk full).
std::vector<SliceRecord> writeShard(const std::filesystem::path& path, const std::vector<Slice>& slices);

// Reads the whole file back; SystemError naming it on a read error.
FileRecord fileRecord(const std::filesystem::path& path);
// InputError naming the file when it is missing, of another size or another checksum.
void verifyFile(const std::filesystem::path& path, const FileRecord& record);

// Reads the dataset `record` describes from `path` into `out` (record.count elements), checking its
// attributes and checksum; errors name the file and the dataset.
void readRecord(const std::filesystem::path& path, const SliceRecord& record, void* out);

}  // namespace rp::checkpoint
