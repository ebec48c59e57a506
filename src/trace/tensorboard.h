// TensorBoard event files of a run's metrics (docs/metrics.md, "TensorBoard"): what HF Trainer's
// report_to="tensorboard" and torchtitan's enable_tensorboard give their users, written by hand — the event
// file format is TFRecord framing (length, masked CRC-32C of the length, the record, masked CRC-32C of the
// record) around tensorflow.Event protocol buffers, of which these few fields are all a scalar needs:
//   Event      { double wall_time = 1; int64 step = 2; string file_version = 3; Summary summary = 5;
//                SessionLog session_log = 7; }
//   Summary    { repeated Value value = 1; }   Value { string tag = 1; float simple_value = 2; }
//   SessionLog { Status status = 1; }          (START = 1: TensorBoard drops what a crashed run logged from the
//                                               step a resumed run starts again)
// Thread-safety: one writer, the reporting rank's loop.
#pragma once

#include <cstddef>
#include <cstdint>
#include <fstream>
#include <string>
#include <utility>
#include <vector>

#include "trace/metrics.h"

namespace rp::trace {

// CRC-32C (Castagnoli) of `size` bytes, and TFRecord's masked form of it.
std::uint32_t crc32c(const void* data, std::size_t size);
std::uint32_t maskedCrc32c(const void* data, std::size_t size);

class TensorBoardWriter {
 public:
  // Creates <directory>/events.out.tfevents.<seconds>.<microseconds>.<host>.<pid> (a new file for every run and
  // resume, as TensorFlow's writers do; the names sort in time order) and writes its version record; a run resumed after step `resumedAt` (> 0) also
  // writes a SessionLog START at resumedAt + 1. Throws SystemError naming the file on failure.
  // Every tag is written under `tagPrefix` (an emulated run's device: "emulated:<profile>/").
  explicit TensorBoardWriter(const std::string& directory, std::int64_t resumedAt = 0, std::string tagPrefix = {});
  // One event at m.step with every finite scalar of the row, tagged train/<metrics.jsonl key> (loss, lr,
  // grad_norm, tokens_per_s, step_time_s, loss_scale, peak_rss_mb, model_tflops, mfu — modelled_tflops and
  // modelled_mfu for an emulated device's row) and eval/loss, eval/ppl; flushed, so TensorBoard reads the run while
  // it goes on.
  void write(const StepMetrics& m);
  // One event at `step` with these scalars (tag, value); non-finite values are left out.
  void write(std::int64_t step, const std::vector<std::pair<std::string, double>>& scalars);
  const std::string& path() const { return path_; }

 private:
  void record(const std::string& event);
  std::string path_;
  std::string prefix_;
  std::ofstream out_;
};

}  // namespace rp::trace
