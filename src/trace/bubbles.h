// The bubble report: how busy each worker was over a run, from its measured compute spans.
// Per worker, over the window [start, end) common to all workers: busy = compute time; fill = idle before
// its first compute; drain = idle after its last; steady = the rest of its idle time (waits, transfers).
// Bubble ratio = total idle / (window x workers).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "trace/timeline.h"

namespace rp::trace {

struct WorkerActivity {
  std::int64_t busyUs = 0;
  std::int64_t firstUs = 0;  // start of the first compute span
  std::int64_t lastUs = 0;   // end of the last compute span
};

// The spans of `thread` in `category`: the worker's host compute spans ("compute", thread 0), or the device's own
// where it keeps a clock ("device", thread 3: the emulated device's compute, as it modelled it).
WorkerActivity activityOf(const std::vector<Span>& spans, int thread, const std::string& category = "compute");

struct BubbleReport {
  std::int64_t windowUs = 0;
  std::vector<WorkerActivity> workers;
  double bubbleRatio() const;
  std::string table() const;  // a printable table, one row per worker
};

BubbleReport bubbleReport(const std::vector<WorkerActivity>& workers);

}  // namespace rp::trace
