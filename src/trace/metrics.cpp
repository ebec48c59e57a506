#include "trace/metrics.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "common/error.h"
#include "common/fmt.h"

namespace rp::trace {

MetricsWriter::MetricsWriter(const std::string& directory, std::int64_t resumedAt)
    : path_((std::filesystem::path(directory) / "metrics.jsonl").string()) {
  std::error_code ec;
  std::filesystem::create_directories(directory, ec);
  if (ec) RP_THROW(SystemError, "{}: cannot create the output directory: {}", directory, ec.message());
  std::vector<std::string> kept;
  if (resumedAt > 0) {
    std::ifstream in(path_);
    for (std::string line; std::getline(in, line);) {
      const auto j = nlohmann::json::parse(line, nullptr, /*allow_exceptions=*/false);
      if (j.is_object() && j.contains("step") && j["step"].is_number_integer() &&
          j["step"].get<std::int64_t>() <= resumedAt)
        kept.push_back(line);
    }
  }
  fd_ = ::open(path_.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd_ < 0) RP_THROW(SystemError, "{}: cannot open for writing: {}", path_, std::strerror(errno));
  for (const auto& line : kept) append(line + '\n', 0);
}

MetricsWriter::~MetricsWriter() {
  if (fd_ >= 0) ::close(fd_);
}

void MetricsWriter::append(const std::string& line, std::int64_t step) {
  std::size_t done = 0;
  while (done < line.size()) {
    const ssize_t n = ::write(fd_, line.data() + done, line.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      const int error = n < 0 ? errno : ENOSPC;
      // The part written goes, so the file ends with a whole line (a torn one would stop its readers).
      if (done > 0 && ::ftruncate(fd_, size_) == 0) ::lseek(fd_, size_, SEEK_SET);
      RP_THROW(SystemError, "{}: write failed{}: {}", path_, step > 0 ? fmt::format(" at step {}", step) : "",
               std::strerror(error));
    }
    done += static_cast<std::size_t>(n);
  }
  size_ += static_cast<std::int64_t>(line.size());
}

void MetricsWriter::write(const StepMetrics& m) {
  nlohmann::json j{{"step", m.step},
                   {"loss", m.loss},
                   {"lr", m.lr},
                   {"grad_norm", m.gradNorm},
                   {"tokens", m.tokens},
                   {"target_tokens", m.targetTokens},
                   {"tokens_per_s", m.tokensPerSecond},
                   {"step_time_s", m.stepTimeSeconds},
                   {"epoch", m.epoch}};
  if (m.lossScale) j["loss_scale"] = *m.lossScale;
  if (m.skipped) j["skipped"] = true;
  if (m.targetTokens == 0) j["no_targets"] = true;  // every row prompt: nothing trained (docs/metrics.md)
  if (m.peakResidentMb) j["peak_rss_mb"] = *m.peakResidentMb;
  if (!m.rankPeakResidentMb.empty()) j["rank_peak_rss_mb"] = m.rankPeakResidentMb;
  if (!m.hostWaits.empty()) {
    j["jobs"] = m.jobs;
    j["host_waits"] = m.hostWaits;
  }
  if (!m.device.empty()) j["device"] = m.device;
  if (m.deviceBusyMs) j["device_busy_ms"] = *m.deviceBusyMs;
  if (m.linkUpMs) j["link_up_ms"] = *m.linkUpMs;
  if (m.linkDownMs) j["link_down_ms"] = *m.linkDownMs;
  if (!m.hostCpuMs.empty()) j["host_cpu_ms"] = m.hostCpuMs;
  // An emulated device's rates are modelled, and their keys say so (docs/metrics.md).
  if (m.modelTflops) j[m.modelled() ? "modelled_tflops" : "model_tflops"] = *m.modelTflops;
  if (m.mfu) j[m.modelled() ? "modelled_mfu" : "mfu"] = *m.mfu;
  if (m.evalLoss) {
    j["eval_loss"] = *m.evalLoss;
    j["eval_ppl"] = std::exp(*m.evalLoss);
  }
  append(j.dump() + '\n', m.step);
}

}  // namespace rp::trace
