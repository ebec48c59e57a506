#include "checkpoint/saver.h"

#include <chrono>

#include <nlohmann/json.hpp>

#include "checkpoint/shard.h"
#include "common/error.h"
#include "common/fault.h"
#include "common/log.h"

namespace rp::checkpoint {
namespace {

using nlohmann::json;

// A writer's report to writer 0: its shard's slice records and the file's size and checksum.
json shardToJson(const std::vector<SliceRecord>& records, const FileRecord& file) {
  json out = json::array();
  for (const auto& r : records) {
    out.push_back({{"kind", kindName(r.kind)},
                   {"tensor", r.tensor},
                   {"shape", r.shape},
                   {"file", r.file},
                   {"offset", r.offset},
                   {"count", r.count},
                   {"crc32", r.crc32}});
  }
  return {{"slices", out}, {"file", {{"name", file.name}, {"bytes", file.bytes}, {"crc32", file.crc32}}}};
}

std::vector<SliceRecord> recordsFromJson(const json& j, FileRecord& file) {
  const json& f = j.at("file");
  file = {f.at("name").get<std::string>(), f.at("bytes").get<std::int64_t>(), f.at("crc32").get<std::uint32_t>()};
  std::vector<SliceRecord> out;
  for (const auto& r : j.at("slices")) {
    out.push_back({parseKind(r.at("kind").get<std::string>(), "slice table"), r.at("tensor").get<std::string>(),
                   r.at("shape").get<std::vector<std::int64_t>>(), r.at("file").get<std::string>(),
                   r.at("offset").get<std::int64_t>(), r.at("count").get<std::int64_t>(),
                   r.at("crc32").get<std::uint32_t>()});
  }
  return out;
}

// Every writer's string, on writer 0 (empty elsewhere).
std::vector<std::string> gatherStrings(control::ControlChannel* writers, const std::string& mine) {
  if (writers == nullptr) return {mine};
  std::vector<std::string> out;
  for (const auto& part : writers->gather(mine.data(), mine.size(), 0)) out.emplace_back(part.begin(), part.end());
  return out;
}

}  // namespace

Saver::Saver(CheckpointDir dir, SaverOptions options, control::ControlChannel* writers)
    : dir_(std::move(dir)), options_(options) {
  if (writers != nullptr) {
    writers_ = writers->duplicate();  // the saving thread's own
    rank_ = writers_->rank();
    size_ = writers_->size();
  }
}

Saver::~Saver() {
  join();
  if (error_) {
    try {
      std::rethrow_exception(error_);
    } catch (const std::exception& e) {
      RP_LOG_ERROR("checkpoint: {}", e.what());
    }
  }
}

void Saver::join() {
  if (thread_.joinable()) thread_.join();
}

void Saver::save(SaveJob job) {
  join();
  check();
  auto body = [this](SaveJob& j) {
    try {
      run(j);
    } catch (const std::exception& e) {
      if (!options_.stopOnError) {
        RP_LOG_WARN(
            "checkpoint of step {} failed, training continues without it (checkpoint.on_error = "
            "\"continue\"): {}",
            j.step, e.what());
        return;
      }
      std::lock_guard lock(mutex_);
      error_ = std::current_exception();
    }
  };
  if (options_.async) {
    thread_ = std::thread([body, job = std::move(job)]() mutable { body(job); });
  } else {
    body(job);
    check();
  }
}

void Saver::check() {
  std::lock_guard lock(mutex_);
  if (error_) std::rethrow_exception(std::exchange(error_, nullptr));
}

void Saver::finish() {
  join();
  check();
}

std::string Saver::previousNote() const {
  try {
    const auto newest = dir_.newest();
    return newest ? fmt::format("the previous one, {}, is intact", newest->filename().string())
                  : "there is no earlier checkpoint to resume from";
  } catch (const std::exception& e) {  // the save's own error is the one to report
    return fmt::format("the earlier checkpoints could not be listed: {}", e.what());
  }
}

StagedSlice stage(const Slice& slice) {
  const auto* data = static_cast<const std::uint8_t*>(slice.data);
  StagedSlice staged{
      slice, std::vector<std::uint8_t>(data, data + static_cast<std::size_t>(slice.count) * elementBytes(slice.kind))};
  staged.slice.data = nullptr;
  return staged;
}

void Saver::run(SaveJob& job) {
  const auto start = std::chrono::steady_clock::now();
  std::string error;
  std::vector<SliceRecord> records;
  FileRecord file;
  std::size_t bytes = 0;
  try {
    dir_.prepare(job.step);
    std::vector<Slice> slices;
    for (auto& s : job.slices) {
      s.slice.data = s.bytes.data();
      bytes += s.bytes.size();
      slices.push_back(s.slice);
    }
    records = writeShard(dir_.shardPath(job.step, rank_), slices);
    file = fileRecord(dir_.shardPath(job.step, rank_));
    fault::maybeInject(options_.worldRank, job.step, "save-shard");
  } catch (const std::exception& e) {
    error = e.what();
  }
  const auto tables = gatherStrings(writers_.get(), error.empty() ? shardToJson(records, file).dump() : "!" + error);
  if (rank_ != 0) {
    if (!error.empty()) RP_THROW(SystemError, "checkpoint of step {}: {}", job.step, error);
    return;
  }
  // Before this save can publish anything (a publish that fails after its rename would name itself).
  const std::string previous = previousNote();
  Manifest& m = job.manifest;
  m.step = job.step;
  m.writers = size_;
  m.slices.clear();
  m.files.clear();
  for (int w = 0; w < size_; ++w) {
    const std::string& t = tables[static_cast<std::size_t>(w)];
    if (!t.empty() && t[0] == '!') {
      dir_.discard(job.step);
      RP_THROW(SystemError, "checkpoint of step {} not saved ({}): writer {}: {}", job.step, previous, w, t.substr(1));
    }
    auto part = recordsFromJson(json::parse(t), m.files.emplace_back());
    m.slices.insert(m.slices.end(), part.begin(), part.end());
  }
  try {
    dir_.publish(m, options_.keep, [&](const char* point) { fault::maybeInject(options_.worldRank, job.step, point); });
  } catch (const std::exception& e) {
    dir_.discard(job.step);
    RP_THROW(SystemError, "checkpoint of step {} not published ({}): {}", job.step, previous, e.what());
  }
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  RP_LOG_INFO("checkpoint {} saved by {} writer(s) ({:.1f} MB from this rank in {:.2f} s)",
              (dir_.root() / CheckpointDir::name(job.step)).string(), size_, static_cast<double>(bytes) / 1e6, seconds);
}

}  // namespace rp::checkpoint
