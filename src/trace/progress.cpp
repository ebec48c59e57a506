#include "trace/progress.h"

#include <unistd.h>

#include <cstdio>

#include "common/log.h"

namespace rp::trace {

Progress::Progress(std::int64_t totalSteps, std::int64_t every)
    : total_(totalSteps), every_(every), interactive_(::isatty(STDERR_FILENO) != 0) {}

Progress::~Progress() {
  if (lineOpen_) std::fputc('\n', stderr);
}

void Progress::update(const StepMetrics& m) {
  elapsed_ += m.stepTimeSeconds;
  const double eta = m.step > 0 ? elapsed_ / static_cast<double>(m.step) * static_cast<double>(total_ - m.step) : 0.0;
  const std::string line = fmt::format(
      "step {}/{} | loss {:.4f} | lr {:.2e} | grad norm {:.3f} | {:.0f} tok/s | ETA {}:{:02d}", m.step, total_, m.loss,
      m.lr, m.gradNorm, m.tokensPerSecond, static_cast<int>(eta) / 60, static_cast<int>(eta) % 60);
  if (interactive_) {
    std::fprintf(stderr, "\r%s%s\033[K", line.c_str(), m.skipped ? " (skipped: overflow)" : "");
    std::fflush(stderr);
    lineOpen_ = true;
  } else if (m.step == 1 || m.step % every_ == 0 || m.step == total_) {
    RP_LOG_INFO("{}{}", line, m.skipped ? " (skipped: overflow)" : "");
  }
}

}  // namespace rp::trace
