// The checkpoint manifest (docs/checkpoint-format.md, "Manifest"): written last by rank 0, read first.
#pragma once

#include <cstdint>
#include <filesystem>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "checkpoint/slices.h"

namespace rp::checkpoint {

inline constexpr const char* kFormatName = "roundpipe-checkpoint";
inline constexpr int kFormatVersion = 1;

struct Manifest {
  std::int64_t step = 0;  // optimizer steps done
  int writers = 0;
  nlohmann::json model;     // path, type, dtype, config, config_sha256
  nlohmann::json lora;      // null for full fine-tunes
  nlohmann::json training;  // tokens, optimizer, schedule, scaler, cursor, rng, mode
  std::string runConfig;    // the effective config (TOML)
  std::string writtenBy;    // "roundpipe 0.1.0 (commit ...)" (rp::versionLine); empty in manifests written before it
  std::vector<SliceRecord> slices;
  // Every shard file with its size and checksum, verified before the file is opened. Empty in manifests written
  // before roundpipe recorded them: their shards are opened unverified (each dataset still has its checksum).
  std::vector<FileRecord> files;
};

nlohmann::json toJson(const Manifest& manifest);
// `where` names the file in errors. Checks the format name, the version, the fields' types, and that each
// tensor's slices of each kind cover [0, numel) exactly once.
Manifest fromJson(const nlohmann::json& json, const std::string& where);

// Writes `<dir>/manifest.json` and fsyncs it.
void writeManifest(const std::filesystem::path& dir, const Manifest& manifest);
Manifest readManifest(const std::filesystem::path& dir);

// Fills every wanted slice from the checkpoint in `dir` (any writer layout): reads each intersecting
// dataset whole, verifies its checksum, copies the overlap. Errors name the tensor, the file or both.
void readSlices(const std::filesystem::path& dir, const Manifest& manifest, const std::vector<Slice>& wanted);

}  // namespace rp::checkpoint
