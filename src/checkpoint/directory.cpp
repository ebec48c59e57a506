#include "checkpoint/directory.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <fstream>
#include <vector>

#include "common/error.h"
#include "common/log.h"

namespace rp::checkpoint {
namespace fs = std::filesystem;
namespace {

constexpr const char* kPrefix = "step-";

bool isCheckpointName(const std::string& name) {
  return name.size() == 13 && name.rfind(kPrefix, 0) == 0 &&
         std::all_of(name.begin() + 5, name.end(), [](char c) { return c >= '0' && c <= '9'; });
}

// Complete checkpoints under root, oldest first.
std::vector<fs::path> complete(const fs::path& root) {
  std::vector<fs::path> out;
  if (!fs::is_directory(root)) return out;
  for (const auto& e : fs::directory_iterator(root)) {
    if (e.is_directory() && isCheckpointName(e.path().filename().string()) && fs::exists(e.path() / "manifest.json"))
      out.push_back(e.path());
  }
  std::sort(out.begin(), out.end());
  return out;
}

}  // namespace

void syncFile(const fs::path& path) {
  const int fd = ::open(path.c_str(), O_RDONLY);
  if (fd < 0) RP_THROW(SystemError, "cannot open {} to fsync it ({})", path.string(), std::strerror(errno));
  const int rc = ::fsync(fd);
  const int err = errno;
  ::close(fd);
  if (rc != 0) RP_THROW(SystemError, "fsync({}) failed ({})", path.string(), std::strerror(err));
}

std::string CheckpointDir::name(std::int64_t step) {
  return fmt::format("{}{:08d}", kPrefix, step);
}

fs::path CheckpointDir::staging(std::int64_t step) const {
  return root_ / (name(step) + ".tmp");
}

fs::path CheckpointDir::shardPath(std::int64_t step, int writer) const {
  return staging(step) / fmt::format("shard-{:05d}.h5", writer);
}

int CheckpointDir::removeStale() const {
  int removed = 0;
  if (!fs::is_directory(root_)) return 0;
  for (const auto& e : fs::directory_iterator(root_)) {
    const std::string n = e.path().filename().string();
    if (e.is_directory() && n.size() > 4 && n.substr(n.size() - 4) == ".tmp") {
      RP_LOG_WARN("checkpoint: removing {}, a partial save of an earlier run", e.path().string());
      fs::remove_all(e.path());
      ++removed;
    }
  }
  return removed;
}

void CheckpointDir::prepare(std::int64_t step) const {
  std::error_code ec;
  fs::create_directories(staging(step), ec);
  if (ec) RP_THROW(SystemError, "cannot create {}: {}", staging(step).string(), ec.message());
}

void CheckpointDir::publish(const Manifest& manifest, int keep, const std::function<void(const char*)>& at) const {
  const fs::path tmp = staging(manifest.step), final = root_ / name(manifest.step);
  writeManifest(tmp, manifest);
  syncFile(tmp);
  if (at) at("save-manifest");
  std::error_code ec;
  if (fs::exists(final)) fs::remove_all(final, ec);  // a save of the same step by an earlier, resumed run
  fs::rename(tmp, final, ec);
  if (ec) RP_THROW(SystemError, "cannot rename {} to {}: {}", tmp.string(), final.string(), ec.message());
  syncFile(root_);
  if (at) at("save-rename");
  const fs::path latest = root_ / "latest", latestTmp = root_ / "latest.tmp";
  {
    std::ofstream out(latestTmp, std::ios::trunc);
    out << name(manifest.step) << '\n';
    out.flush();
    if (!out) RP_THROW(SystemError, "cannot write {} ({})", latestTmp.string(), std::strerror(errno));
  }
  syncFile(latestTmp);
  fs::rename(latestTmp, latest, ec);
  if (ec) RP_THROW(SystemError, "cannot rename {} to {}: {}", latestTmp.string(), latest.string(), ec.message());
  syncFile(root_);
  if (keep > 0) {
    auto all = complete(root_);
    for (std::size_t i = 0; i + static_cast<std::size_t>(keep) < all.size(); ++i) fs::remove_all(all[i], ec);
  }
}

void CheckpointDir::discard(std::int64_t step) const {
  std::error_code ec;
  fs::remove_all(staging(step), ec);
}

std::optional<fs::path> CheckpointDir::newest() const {
  auto all = complete(root_);
  if (all.empty()) return std::nullopt;
  return all.back();
}

fs::path CheckpointDir::resolve(const std::string& spec) const {
  if (spec == "latest") {
    // The pointer names the newest published checkpoint; a crash between the rename and the pointer update
    // leaves a newer complete one, which wins.
    const auto found = newest();
    if (!found)
      RP_THROW(InputError, "{}: no complete checkpoint (a step-N directory with a manifest.json)", root_.string());
    return *found;
  }
  const fs::path direct(spec);
  const fs::path candidate = fs::is_directory(direct) ? direct : root_ / spec;
  if (!fs::is_directory(candidate)) {
    RP_THROW(InputError, "checkpoint '{}': no such checkpoint directory (looked at {} and {})", spec, direct.string(),
             (root_ / spec).string());
  }
  if (candidate.filename().string().ends_with(".tmp")) {
    RP_THROW(InputError, "checkpoint '{}': {} is a partial save (a .tmp directory) and is never loaded", spec,
             candidate.string());
  }
  return candidate;
}

}  // namespace rp::checkpoint
