#include "trace/formats.h"

#include <cstdio>
#include <fstream>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "common/error.h"

namespace rp::trace {

std::string computeSpanName(const ComputeSpan& s) {
  return fmt::format("{} {}-{} mb {} (step {})", s.kind, s.first, s.last, s.microbatch, s.step);
}

std::optional<ComputeSpan> parseComputeSpanName(const std::string& name) {
  char kind[16] = {};
  long long first = 0, last = 0, mb = 0, step = 0;
  int consumed = 0;
  if (std::sscanf(name.c_str(), "%15s %lld-%lld mb %lld (step %lld)%n", kind, &first, &last, &mb, &step, &consumed) !=
          5 ||
      static_cast<std::size_t>(consumed) != name.size()) {
    return std::nullopt;
  }
  const std::string k = kind;
  if (k != "fwd" && k != "fused" && k != "bwd" && k != "recompute") return std::nullopt;
  // Only what the runtime writes: layers first <= last and microbatches below a million (fuzzing: a layer
  // index out of int's range wrapped to -1 and was written through).
  constexpr long long kMax = 1'000'000;
  if (first < 0 || last < first || last >= kMax || mb < 0 || mb >= kMax) return std::nullopt;
  return ComputeSpan{k, static_cast<int>(first), static_cast<int>(last), static_cast<int>(mb), step};
}

void writeLayerProfile(const std::string& path, const LayerProfileFile& p) {
  std::ofstream out(path);
  out << nlohmann::json{{"forward_ms", p.forwardMs},
                        {"backward_ms", p.backwardMs},
                        {"plan", p.plan},
                        {"workers", p.workers},
                        {"microbatches", p.microbatches},
                        {"device", p.device},
                        {"times", p.modelled() ? "modelled" : "measured"}}
             .dump(1)
      << '\n';
  if (!out.flush()) RP_THROW(SystemError, "{}: cannot write the layer profile", path);
}

LayerProfileFile readLayerProfile(const std::string& path) {
  std::ifstream in(path);
  if (!in) RP_THROW(InputError, "{}: cannot open the profile", path);
  LayerProfileFile p;
  try {
    const nlohmann::json j = nlohmann::json::parse(in);
    p.forwardMs = j.at("forward_ms").get<std::vector<double>>();
    p.backwardMs = j.at("backward_ms").get<std::vector<double>>();
    p.plan = j.value("plan", std::string());
    p.workers = j.value("workers", 0);
    p.microbatches = j.value("microbatches", std::int64_t{0});
    p.device = j.value("device", std::string());
  } catch (const nlohmann::json::exception& e) {
    RP_THROW(InputError, "{}: expected {{\"forward_ms\": [...], \"backward_ms\": [...]}}: {}", path, e.what());
  }
  if (p.forwardMs.size() != p.backwardMs.size()) {
    RP_THROW(InputError, "{}: forward_ms has {} layers but backward_ms {}", path, p.forwardMs.size(),
             p.backwardMs.size());
  }
  return p;
}

}  // namespace rp::trace
