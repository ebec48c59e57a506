#include "run/sampling.h"

#include <optional>

#include "data/dataset.h"
#include "model/generate.h"

namespace rp::run {

std::string sample(model::CausalLM& model, const data::Tokenizer& tokenizer, const config::RunConfig& config,
                   const std::string& prompt) {
  const auto& o = config.output;
  const model::Sampling sampling{o.sampleTemperature, o.sampleTopP, static_cast<std::uint64_t>(config.train.seed)};
  std::optional<data::ChatTemplate> chat;
  if (o.sampleChat) chat = data::resolveChatTemplate(config.data.chatTemplate, tokenizer);
  return model::sampleText(model, tokenizer, prompt, o.sampleTokens, sampling, chat ? &*chat : nullptr);
}

}  // namespace rp::run
