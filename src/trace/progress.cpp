#include "trace/progress.h"

#include <unistd.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <string>

#include "common/log.h"

namespace rp::trace {

Progress::Progress(std::int64_t totalSteps, std::int64_t every)
    : total_(totalSteps), every_(every), interactive_(::isatty(STDERR_FILENO) != 0) {}

Progress::~Progress() {
  if (lineOpen_) std::fputc('\n', stderr);
}

namespace {

// The largest resident peak: " | peak 1.23 GB" (a pipeline run adds the rank: " (rank 2)").
std::string memory(const StepMetrics& m) {
  const auto& ranks = m.rankPeakResidentMb;
  if (!ranks.empty()) {
    const auto top = std::max_element(ranks.begin(), ranks.end());
    return fmt::format(" | peak {:.3g} GB (rank {})", *top / 1e3, top - ranks.begin());
  }
  return m.peakResidentMb ? fmt::format(" | peak {:.3g} GB", *m.peakResidentMb / 1e3) : "";
}

// The time left: "m:ss" under an hour, "h:mm:ss" under a hundred days, "> 100 days" beyond (train.max_steps
// = 2^63 - 1 once printed "-35791394:-8").
std::string eta(double seconds) {
  if (!(seconds < 100 * 86400.0)) return "> 100 days";
  const auto s = static_cast<std::int64_t>(std::max(0.0, seconds));
  if (s < 3600) return fmt::format("{}:{:02d}", s / 60, s % 60);
  return fmt::format("{}:{:02d}:{:02d}", s / 3600, s / 60 % 60, s % 60);
}

}  // namespace

void Progress::update(const StepMetrics& m) {
  elapsed_ += m.stepTimeSeconds;
  ++timed_;
  const double left =
      elapsed_ / static_cast<double>(timed_) * static_cast<double>(std::max<std::int64_t>(0, total_ - m.step));
  const std::string text =
      fmt::format("step {}/{} | loss {:.4f} | lr {:.2e} | grad norm {:.3f} | {:.0f} tok/s | ETA {}", m.step, total_,
                  m.loss, m.lr, m.gradNorm, m.tokensPerSecond, eta(left));
  const char* skipped = m.skipped            ? (m.lossScale ? " (skipped: overflow)" : " (skipped: not finite)")
                        : m.targetTokens == 0 ? " (no target tokens)"
                                              : "";
  std::string line = text;
  const char* modelled = m.modelled() ? "modelled " : "";
  if (m.modelTflops) line += fmt::format(" | {}{:.3g} TFLOP/s", modelled, *m.modelTflops);
  if (m.mfu) line += fmt::format(" | {}MFU {:.1f}%", modelled, 100 * *m.mfu);
  if (m.evalLoss) line += fmt::format(" | eval {:.4f}", *m.evalLoss);
  line += memory(m);
  // An emulated device's numbers are a model's, its losses synthetic: the line says so (docs/emulated.md).
  if (m.deviceBusyMs) {
    line += fmt::format(" | {} (device {:.0f} ms, link {:.0f}/{:.0f} ms)", m.device, *m.deviceBusyMs,
                        m.linkUpMs.value_or(0), m.linkDownMs.value_or(0));
  }
  if (interactive_) {
    std::fprintf(stderr, "\r%s%s\033[K", line.c_str(), skipped);
    std::fflush(stderr);
    lineOpen_ = true;
  } else if (m.step == 1 || m.step % every_ == 0 || m.step == total_ || m.evalLoss) {
    RP_LOG_INFO("{}{}", line, skipped);
  }
}

}  // namespace rp::trace
