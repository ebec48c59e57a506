// The metrics log: one JSON object per optimizer step in <output>/metrics.jsonl (docs/metrics.md).
// Written by rank 0 only; flushed after every record so a crash loses at most the step in flight.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "trace/formats.h"

namespace rp::trace {

struct StepMetrics {
  std::int64_t step = 0;  // 1-based optimizer step
  double loss = 0.0;      // mean next-token loss over the step's target tokens
  double lr = 0.0;
  double gradNorm = 0.0;          // before clipping
  std::int64_t tokens = 0;        // input tokens processed this step
  std::int64_t targetTokens = 0;  // tokens that carried a loss
  double tokensPerSecond = 0.0;
  double stepTimeSeconds = 0.0;
  std::int64_t epoch = 0;
  std::optional<double> lossScale;       // fp16 runs
  bool skipped = false;                  // no update: fp16 overflow, or a non-finite loss or gradient norm
  std::optional<double> peakResidentMb;  // the reporting process's resident peak so far (docs/metrics.md)
  std::optional<double> evalLoss;        // the evaluation loss after this step, where evaluated
  std::optional<double> modelTflops;     // model FLOPs of the step / its time (the whole job), where known
  std::optional<double> mfu;             // modelTflops / the job's peak, where the peak is known
  // Pipeline runs: every rank's resident peak so far, by node rank (several nodes: the largest over them).
  std::vector<double> rankPeakResidentMb;
  // Pipeline runs: the reporting rank's stage jobs in the iteration and the blocking waits of the thread that
  // issued them, by reason ("copy", "readiness", "peer", "loss_read", "timing"; device/host_waits.h).
  std::int64_t jobs = 0;
  std::map<std::string, std::int64_t> hostWaits;
  // Pipeline runs: what the workers compute on ("cpu", "cuda:<name>", "emulated:<profile>": docs/emulated.md).
  std::string device;
  // An emulated device's run: its times, and so its model TFLOP/s and MFU, are a model's (docs/emulated.md).
  bool modelled() const { return modelledDevice(device); }
  // A device that keeps its own clock (the emulated one): the reporting rank's device busy computing, and its
  // host link busy per direction, in the spans its iteration took (milliseconds).
  std::optional<double> deviceBusyMs, linkUpMs, linkDownMs;
  // Pipeline runs: the reporting rank's CPU time in the step by role (Note [Host CPU by role]: engine, optimizer,
  // copies, control, other), milliseconds.
  std::map<std::string, double> hostCpuMs;
};

class MetricsWriter {
 public:
  // Creates (truncates) <directory>/metrics.jsonl; throws SystemError naming the file on failure. A run
  // resumed after step `resumedAt` (> 0) keeps the existing lines of steps 1..resumedAt and drops the rest
  // (the crashed run's steps after its checkpoint, which the resumed run redoes).
  explicit MetricsWriter(const std::string& directory, std::int64_t resumedAt = 0);
  ~MetricsWriter();
  MetricsWriter(const MetricsWriter&) = delete;
  MetricsWriter& operator=(const MetricsWriter&) = delete;
  // Appends the step's line whole or not at all: a write cut short (a full disk) is truncated away before the
  // SystemError naming the file, the step and the reason, so every line of the file is a whole one.
  void write(const StepMetrics& m);
  const std::string& path() const { return path_; }

 private:
  void append(const std::string& line, std::int64_t step);
  std::string path_;
  int fd_ = -1;
  std::int64_t size_ = 0;  // the bytes of whole lines written
};

}  // namespace rp::trace
