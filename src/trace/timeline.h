// A per-rank timeline of what each thread did, written as Chrome-trace JSON (chrome://tracing, Perfetto):
// one process per rank, thread 0 the worker, thread 1 the optimizer, thread 2 the worker's stage jobs
// (spans enclosing the job's uploads, waits, computes and downloads), thread 3 a device that keeps its own
// clock (the emulated one: its compute and each direction of its link, as it modelled them). Times are microseconds of the node's
// monotonic clock since a common origin, so the ranks of a node line up.
// Thread-safety: record() may be called from any thread.
#pragma once

#include <chrono>
#include <cstdint>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

namespace rp::trace {

struct Span {
  std::string name;
  std::string category;  // compute | upload | download | wait | optimizer
  int thread = 0;
  std::int64_t startUs = 0;
  std::int64_t durationUs = 0;
  double cpuMs = -1.0;  // >= 0: the CPU time its role's threads spent in it (an optimizer span's, Scope)
};

// A value (or several) at a time, drawn by chrome://tracing as a counter track of the rank: the host's CPU time
// by role in a step, the device's busy time in an iteration.
struct Counter {
  std::string name;
  std::int64_t atUs = 0;
  std::vector<std::pair<std::string, double>> values;
};

class Timeline {
 public:
  using Clock = std::chrono::steady_clock;
  Timeline(int rank, Clock::time_point origin) : rank_(rank), origin_(origin) {}

  std::int64_t nowUs() const;
  std::int64_t usAt(Clock::time_point t) const;
  // Names the device track (thread 3) and the rank's process with it ("emulated rtx4090x8").
  void setDeviceLabel(std::string label);
  void record(Span span);
  void count(Counter counter);
  std::vector<Span> spans() const;
  // {"traceEvents": [...]} for this rank alone.
  std::string toJson() const;
  int rank() const { return rank_; }

  // RAII: records [construction, destruction) as one span; an "optimizer" span with the CPU time the optimizer's
  // threads spent meanwhile (Note [Host CPU by role]: its work, where the span's length also holds its waits).
  class Scope {
   public:
    Scope(Timeline* timeline, std::string name, std::string category, int thread);
    ~Scope();
    Scope(const Scope&) = delete;
    Scope& operator=(const Scope&) = delete;

   private:
    Timeline* timeline_;
    Span span_;
    double cpuStart_ = -1.0;
  };

 private:
  int rank_;
  Clock::time_point origin_;
  std::string deviceLabel_;
  mutable std::mutex mutex_;
  std::vector<Span> spans_;
  std::vector<Counter> counters_;
};

// Merges per-rank trace files (each {"traceEvents": [...]}) into one.
void mergeTraces(const std::vector<std::string>& inputs, const std::string& output);

}  // namespace rp::trace
