#include "trace/bubbles.h"

#include <algorithm>
#include <limits>

#include <fmt/format.h>

namespace rp::trace {

WorkerActivity activityOf(const std::vector<Span>& spans, int thread, const std::string& category) {
  WorkerActivity a;
  a.firstUs = std::numeric_limits<std::int64_t>::max();
  for (const auto& s : spans) {
    if (s.thread != thread || s.category != category) continue;
    a.busyUs += s.durationUs;
    a.firstUs = std::min(a.firstUs, s.startUs);
    a.lastUs = std::max(a.lastUs, s.startUs + s.durationUs);
  }
  if (a.busyUs == 0) a.firstUs = 0;
  return a;
}

BubbleReport bubbleReport(const std::vector<WorkerActivity>& workers) {
  BubbleReport r;
  r.workers = workers;
  std::int64_t start = std::numeric_limits<std::int64_t>::max(), end = 0;
  for (const auto& w : workers) {
    if (w.busyUs == 0) continue;
    start = std::min(start, w.firstUs);
    end = std::max(end, w.lastUs);
  }
  if (end <= start) return r;
  r.windowUs = end - start;
  for (auto& w : r.workers) {  // rebase onto the common window
    if (w.busyUs == 0) {
      w.firstUs = end;
      w.lastUs = end;
    }
    w.firstUs -= start;
    w.lastUs -= start;
  }
  return r;
}

double BubbleReport::bubbleRatio() const {
  if (windowUs == 0 || workers.empty()) return 0.0;
  std::int64_t busy = 0;
  for (const auto& w : workers) busy += w.busyUs;
  return 1.0 - static_cast<double>(busy) / (static_cast<double>(windowUs) * static_cast<double>(workers.size()));
}

std::string BubbleReport::table() const {
  std::string out = fmt::format("{:>6} {:>10} {:>8} {:>10} {:>10} {:>10}\n", "worker", "busy ms", "busy %", "fill ms",
                                "steady ms", "drain ms");
  const double window = static_cast<double>(windowUs) / 1000.0;
  for (std::size_t i = 0; i < workers.size(); ++i) {
    const auto& w = workers[i];
    const double busy = static_cast<double>(w.busyUs) / 1000.0;
    const double fill = static_cast<double>(w.firstUs) / 1000.0;
    const double drain = window - static_cast<double>(w.lastUs) / 1000.0;
    const double steady = window - busy - fill - drain;
    out += fmt::format("{:>6} {:>10.1f} {:>7.1f}% {:>10.1f} {:>10.1f} {:>10.1f}\n", i, busy,
                       window > 0 ? 100.0 * busy / window : 0.0, fill, steady, drain);
  }
  out += fmt::format("window {:.1f} ms, bubble ratio {:.1f}% (idle / (window x {} workers))", window,
                     100.0 * bubbleRatio(), workers.size());
  return out;
}

}  // namespace rp::trace
