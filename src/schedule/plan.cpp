#include "schedule/plan.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "common/error.h"

namespace rp::schedule {
namespace {

std::string ranges(const std::vector<Range>& rs) {
  std::vector<std::string> parts;
  for (const auto& r : rs)
    parts.push_back(r.size() == 1 ? fmt::format("{}", r.begin) : fmt::format("{}-{}", r.begin, r.end - 1));
  return fmt::format("{}", fmt::join(parts, ","));
}

}  // namespace

void validate(const Plan& p, int layerCount, const std::string& what) {
  if (layerCount < 2) RP_THROW(InputError, "{}: a model needs at least an embedding and a head", what);
  if (p.fused.end != layerCount || p.fused.begin >= p.fused.end) {
    RP_THROW(InputError, "{}: the fused stage must end at the head (layer {}) and hold at least it, got {}-{}", what,
             layerCount - 1, p.fused.begin, p.fused.end - 1);
  }
  const int e = p.fused.begin;
  int next = 0;
  for (const auto& r : p.forward) {
    if (r.begin != next || r.end <= r.begin) {
      RP_THROW(InputError,
               "{}: forward stages must be non-empty and consecutive from layer 0; stage {}-{} follows "
               "layer {}",
               what, r.begin, r.end - 1, next - 1);
    }
    next = r.end;
  }
  if (next != e)
    RP_THROW(InputError, "{}: forward stages cover [0, {}) but the fused stage starts at {}", what, next, e);
  next = 0;
  for (auto it = p.backward.rbegin(); it != p.backward.rend(); ++it) {
    if (it->begin != next || it->end <= it->begin) {
      RP_THROW(InputError,
               "{}: backward stages, read shallowest first, must be non-empty and consecutive from layer "
               "0; stage {}-{} follows layer {}",
               what, it->begin, it->end - 1, next - 1);
    }
    next = it->end;
  }
  if (next != e)
    RP_THROW(InputError, "{}: backward stages cover [0, {}) but the fused stage starts at {}", what, next, e);
  if (e == 0 && (!p.forward.empty() || !p.backward.empty())) {
    RP_THROW(InputError, "{}: with the fused stage covering every layer there are no other stages", what);
  }
}

std::string describe(const Plan& p) {
  return fmt::format("fwd {} | fused {}-{} | bwd {}", ranges(p.forward), p.fused.begin, p.fused.end - 1,
                     ranges(p.backward));
}

Plan planFromCounts(const std::vector<int>& forward, int fusedDecoderLayers, const std::vector<int>& backward,
                    int layerCount) {
  Plan p;
  int at = 0;
  for (int n : forward) {
    p.forward.push_back({at, at + n});
    at += n;
  }
  p.fused = {layerCount - 1 - fusedDecoderLayers, layerCount};
  int end = p.fused.begin;
  for (int n : backward) {
    p.backward.push_back({end - n, end});
    end -= n;
  }
  return p;
}

Plan parsePlan(const std::string& text, int layerCount, const std::string& what) {
  std::vector<std::string> parts;
  std::size_t start = 0;
  while (true) {
    const auto bar = text.find('|', start);
    parts.push_back(text.substr(start, bar == std::string::npos ? std::string::npos : bar - start));
    if (bar == std::string::npos) break;
    start = bar + 1;
  }
  if (parts.size() != 3) {
    RP_THROW(InputError,
             "{} = \"{}\": expected \"auto\" or \"F1,F2,... | fused | B1,B2,...\" (stage sizes in "
             "layers)",
             what, text);
  }
  auto numbers = [&](const std::string& part) {
    std::vector<int> out;
    std::size_t pos = 0;
    while (pos < part.size()) {
      const auto comma = part.find(',', pos);
      std::string item = part.substr(pos, comma == std::string::npos ? std::string::npos : comma - pos);
      const auto first = item.find_first_not_of(" \t");
      if (first != std::string::npos) {
        item = item.substr(first, item.find_last_not_of(" \t") - first + 1);
        try {
          std::size_t used = 0;
          const int n = std::stoi(item, &used);
          if (n < 0 || item.find_first_not_of(" \t", used) != std::string::npos) throw std::invalid_argument(item);
          out.push_back(n);
        } catch (const std::exception&) {
          RP_THROW(InputError, "{} = \"{}\": '{}' is not a layer count", what, text, item);
        }
      }
      if (comma == std::string::npos) break;
      pos = comma + 1;
    }
    return out;
  };
  const auto fused = numbers(parts[1]);
  if (fused.size() != 1)
    RP_THROW(InputError, "{} = \"{}\": the middle part is the fused stage's decoder-layer count", what, text);
  Plan plan = planFromCounts(numbers(parts[0]), fused[0], numbers(parts[2]), layerCount);
  validate(plan, layerCount, what);
  return plan;
}

std::string formatPlan(const Plan& plan) {
  std::vector<int> forward, backward;
  for (const auto& r : plan.forward) forward.push_back(r.size());
  for (const auto& r : plan.backward) backward.push_back(r.size());
  return fmt::format("{} | {} | {}", fmt::join(forward, ","), plan.fused.size() - 1, fmt::join(backward, ","));
}

}  // namespace rp::schedule
