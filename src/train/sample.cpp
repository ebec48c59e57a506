#include "train/sample.h"

#include "model/generate.h"

namespace rp::train {

std::string greedySample(model::CausalLM& model, const data::Tokenizer& tokenizer, const std::string& prompt,
                         std::int64_t tokens) {
  const bool wasTraining = model.is_training();
  model.eval();
  std::vector<std::int32_t> ids = tokenizer.encode(prompt, /*addSpecialTokens=*/false);
  std::vector<std::int64_t> input(ids.begin(), ids.end());
  if (model.config().bosTokenId >= 0) input.insert(input.begin(), model.config().bosTokenId);
  auto generated = model::generateGreedy(model, input, tokens, model.config().eosTokenId);
  if (!generated.empty() && generated.back() == model.config().eosTokenId) generated.pop_back();
  ids.insert(ids.end(), generated.begin(), generated.end());
  model.train(wasTraining);
  return tokenizer.decode(ids);
}

}  // namespace rp::train
