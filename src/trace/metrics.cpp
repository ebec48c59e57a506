#include "trace/metrics.h"

#include <cerrno>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "common/error.h"

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
  out_.open(path_, std::ios::trunc);
  if (!out_) RP_THROW(SystemError, "{}: cannot open for writing: {}", path_, std::strerror(errno));
  for (const auto& line : kept) out_ << line << '\n';
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
  out_ << j.dump() << '\n';
  out_.flush();
  if (!out_) RP_THROW(SystemError, "{}: write failed at step {} (disk full?)", path_, m.step);
}

}  // namespace rp::trace
