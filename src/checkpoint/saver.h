// Saving a step's state (docs/checkpoint-format.md, "Publish protocol" and "Async save"): every writer
// hands over a staged copy of its slices; a background thread (or the caller, when not async) writes the
// writer's shard, writer 0 gathers every writer's slice table and publishes. Torch-free.
// Thread-safety: save/check/finish from one thread per writer; the writers' channel is used only by the
// saving thread (a duplicate).
#pragma once

#include <cstdint>
#include <exception>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "checkpoint/directory.h"
#include "control/channel.h"

namespace rp::checkpoint {

// A slice with its own copy of the values: the state of one step, which training may overwrite meanwhile.
struct StagedSlice {
  Slice slice;  // slice.data is set when written
  std::vector<std::uint8_t> bytes;
};
// A copy of the slice's elements (elementBytes(kind) each), and the slice without its pointer.
StagedSlice stage(const Slice& slice);

struct SaveJob {
  std::int64_t step = 0;
  std::vector<StagedSlice> slices;
  Manifest manifest;  // writer 0 only: every field but `writers` and `slices`
};

struct SaverOptions {
  int keep = 3;
  bool stopOnError = true;
  bool async = true;
  int worldRank = 0;  // for fault injection points and messages
};

class Saver {
 public:
  // `writers`: the channel of every writer (collective: it is duplicated), or null for a single writer.
  Saver(CheckpointDir dir, SaverOptions options, control::ControlChannel* writers);
  ~Saver();  // waits for a running save; its error is logged, not thrown
  Saver(const Saver&) = delete;
  Saver& operator=(const Saver&) = delete;

  // Waits for the previous save, then saves `job` (in the background when async).
  void save(SaveJob job);
  // Rethrows the error of a finished save (on_error = stop); with on_error = continue, errors were logged.
  void check();
  // Waits for the running save, then check().
  void finish();

 private:
  void run(SaveJob& job);
  void join();
  // What a failed save left to resume from, for its error: the newest published checkpoint, or none.
  std::string previousNote() const;

  CheckpointDir dir_;
  SaverOptions options_;
  std::unique_ptr<control::ControlChannel> writers_;
  int rank_ = 0, size_ = 1;
  std::thread thread_;
  std::mutex mutex_;
  std::exception_ptr error_;
};

}  // namespace rp::checkpoint
