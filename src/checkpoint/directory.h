// The checkpoints directory of a run (docs/checkpoint-format.md, "Directory layout" and "Publish protocol"):
// staging, atomic publish, the `latest` pointer, retention, and finding what to resume from.
#pragma once

#include <cstdint>
#include <filesystem>
#include <functional>
#include <optional>
#include <string>

#include "checkpoint/manifest.h"

namespace rp::checkpoint {

// fsync a file or a directory; throws SystemError naming it.
void syncFile(const std::filesystem::path& path);

class CheckpointDir {
 public:
  explicit CheckpointDir(std::filesystem::path root) : root_(std::move(root)) {}
  const std::filesystem::path& root() const { return root_; }

  static std::string name(std::int64_t step);                            // "step-00000040"
  std::filesystem::path staging(std::int64_t step) const;                // <root>/step-00000040.tmp
  std::filesystem::path shardPath(std::int64_t step, int writer) const;  // <staging>/shard-00001.h5

  // Rank 0 at start: removes every *.tmp directory (partial saves of a crashed run); returns how many.
  int removeStale() const;
  // Creates the staging directory of `step` (idempotent; every writer calls it).
  void prepare(std::int64_t step) const;
  // Rank 0, once every shard is written: the manifest, the rename, the `latest` pointer, retention.
  // `at` (optional) is called at "save-manifest" and "save-rename" (Note [Fault injection]).
  void publish(const Manifest& manifest, int keep, const std::function<void(const char*)>& at = {}) const;
  // After a failed save: removes the staging directory (best effort).
  void discard(std::int64_t step) const;

  // The newest complete checkpoint (a directory with a manifest), or none.
  std::optional<std::filesystem::path> newest() const;
  // `spec` is "latest", a checkpoint name inside the root, or a path to a checkpoint directory.
  std::filesystem::path resolve(const std::string& spec) const;

 private:
  std::filesystem::path root_;
};

}  // namespace rp::checkpoint
