#include "model/generate.h"

#include <algorithm>
#include <numeric>

#include "common/error.h"
#include "model/libtorch.h"

namespace rp::model {

std::int64_t nextToken(const at::Tensor& logits, const Sampling& sampling, std::mt19937_64& rng) {
  if (sampling.temperature <= 0) return logits.argmax(-1).item<std::int64_t>();
  const auto probs = torch::softmax(logits.to(torch::kDouble) / sampling.temperature, -1).contiguous();
  const double* p = probs.data_ptr<double>();
  std::vector<std::int64_t> order(static_cast<std::size_t>(probs.numel()));
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(), [&](auto a, auto b) { return p[a] > p[b]; });
  // Keep tokens while the mass before them is below topP (transformers removes those whose ascending cumulative
  // probability is <= 1 - topP: the same set).
  std::size_t keep = 0;
  double mass = 0;
  while (keep < order.size() && (keep == 0 || mass < sampling.topP)) mass += p[order[keep++]];
  std::uniform_real_distribution<double> uniform(0.0, mass);
  double u = uniform(rng);
  for (std::size_t k = 0; k < keep; ++k) {
    u -= p[order[k]];
    if (u < 0) return order[k];
  }
  return order[keep - 1];
}

std::vector<std::int64_t> generate(CausalLM& model, const std::vector<std::int64_t>& prompt, std::int64_t maxNewTokens,
                                   const std::vector<std::int64_t>& stopIds, const Sampling& sampling) {
  if (prompt.empty()) RP_THROW(InputError, "generate: the prompt is empty (expected at least a BOS token)");
  torch::NoGradGuard noGrad;
  std::mt19937_64 rng(sampling.seed);
  std::vector<std::int64_t> tokens = prompt;
  std::vector<std::int64_t> generated;
  for (std::int64_t step = 0; step < maxNewTokens; ++step) {
    if (static_cast<std::int64_t>(tokens.size()) >= model.config().maxPositions) break;
    const auto ids = torch::tensor(tokens, torch::kInt64).unsqueeze(0);
    const auto logits = model.logits(causalBatch(ids));
    const auto next = nextToken(logits.select(1, logits.size(1) - 1).squeeze(0), sampling, rng);
    tokens.push_back(next);
    generated.push_back(next);
    if (std::find(stopIds.begin(), stopIds.end(), next) != stopIds.end()) break;
  }
  return generated;
}

std::string sampleText(CausalLM& model, const data::Tokenizer& tokenizer, const std::string& prompt,
                       std::int64_t tokens, const Sampling& sampling, const data::ChatTemplate* chat) {
  const bool wasTraining = model.is_training();
  model.eval();
  std::vector<std::int64_t> stops;
  if (model.config().eosTokenId >= 0) stops.push_back(model.config().eosTokenId);
  std::vector<std::int64_t> input;
  std::vector<std::int32_t> ids;
  if (chat != nullptr) {
    for (const auto& special : tokenizer.specialTokens()) {
      if (const auto id = tokenizer.tokenId(special); id >= 0) stops.push_back(id);
    }
    const auto rendered = tokenizer.encode(data::renderPrompt({{"user", prompt}}, *chat), /*addSpecialTokens=*/false);
    input.assign(rendered.begin(), rendered.end());
  } else {
    ids = tokenizer.encode(prompt, /*addSpecialTokens=*/false);
    input.assign(ids.begin(), ids.end());
    if (model.config().bosTokenId >= 0) input.insert(input.begin(), model.config().bosTokenId);
  }
  auto generated = generate(model, input, tokens, stops, sampling);
  if (!generated.empty() && std::find(stops.begin(), stops.end(), generated.back()) != stops.end())
    generated.pop_back();
  ids.insert(ids.end(), generated.begin(), generated.end());
  model.train(wasTraining);
  return tokenizer.decode(ids);
}

}  // namespace rp::model
