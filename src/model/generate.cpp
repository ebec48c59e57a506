#include "model/generate.h"

#include <torch/torch.h>

#include "common/error.h"

namespace rp::model {

std::vector<std::int64_t> generateGreedy(CausalLM& model, const std::vector<std::int64_t>& prompt,
                                         std::int64_t maxNewTokens, std::int64_t eosTokenId) {
  if (prompt.empty()) RP_THROW(InputError, "generateGreedy: the prompt is empty (expected at least a BOS token)");
  torch::NoGradGuard noGrad;
  std::vector<std::int64_t> tokens = prompt;
  std::vector<std::int64_t> generated;
  for (std::int64_t step = 0; step < maxNewTokens; ++step) {
    if (static_cast<std::int64_t>(tokens.size()) >= model.config().maxPositions) break;
    const auto ids = torch::tensor(tokens, torch::kInt64).unsqueeze(0);
    const auto logits = model.logits(causalBatch(ids));
    const auto next = logits.select(1, logits.size(1) - 1).argmax(-1).item<std::int64_t>();
    tokens.push_back(next);
    generated.push_back(next);
    if (next == eosTokenId) break;
  }
  return generated;
}

std::string greedySample(CausalLM& model, const data::Tokenizer& tokenizer, const std::string& prompt,
                         std::int64_t tokens) {
  const bool wasTraining = model.is_training();
  model.eval();
  std::vector<std::int32_t> ids = tokenizer.encode(prompt, /*addSpecialTokens=*/false);
  std::vector<std::int64_t> input(ids.begin(), ids.end());
  if (model.config().bosTokenId >= 0) input.insert(input.begin(), model.config().bosTokenId);
  auto generated = generateGreedy(model, input, tokens, model.config().eosTokenId);
  if (!generated.empty() && generated.back() == model.config().eosTokenId) generated.pop_back();
  ids.insert(ids.end(), generated.begin(), generated.end());
  model.train(wasTraining);
  return tokenizer.decode(ids);
}

}  // namespace rp::model
