#include "model/expert_layout.h"

#include <fmt/format.h>

#include "common/error.h"
#include "model/libtorch.h"

namespace rp::model {
namespace {

constexpr const char* kGateUp = "experts.gate_up_proj";
constexpr const char* kDown = "experts.down_proj";

}  // namespace

bool isStackedExperts(const std::string& name) {
  return name.ends_with(std::string(".") + kGateUp) || name.ends_with(std::string(".") + kDown);
}

std::vector<NamedTensor> perExpertViews(const std::string& name, const torch::Tensor& stacked) {
  RP_CHECK(isStackedExperts(name) && stacked.dim() == 3, "'{}' is not a stacked expert tensor", name);
  const bool gateUp = name.ends_with(kGateUp);
  const std::string prefix = name.substr(0, name.size() - std::string(gateUp ? kGateUp : kDown).size());
  std::vector<NamedTensor> out;
  for (std::int64_t e = 0; e < stacked.size(0); ++e) {
    const auto expert = stacked[e];
    if (gateUp) {
      const auto I = expert.size(0) / 2;
      out.emplace_back(fmt::format("{}experts.{}.gate_proj.weight", prefix, e), expert.narrow(0, 0, I));
      out.emplace_back(fmt::format("{}experts.{}.up_proj.weight", prefix, e), expert.narrow(0, I, I));
    } else {
      out.emplace_back(fmt::format("{}experts.{}.down_proj.weight", prefix, e), expert);
    }
  }
  return out;
}

void toPublishedLayout(std::map<std::string, torch::Tensor>& tensors) {
  std::vector<std::string> stacked;
  for (const auto& [name, t] : tensors) {
    if (isStackedExperts(name)) stacked.push_back(name);
  }
  for (const auto& name : stacked) {
    const torch::Tensor t = tensors.at(name);
    tensors.erase(name);
    for (auto& [part, view] : perExpertViews(name, t)) tensors[part] = view.contiguous();
  }
}

}  // namespace rp::model
