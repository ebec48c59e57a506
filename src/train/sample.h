// A greedy text sample from a model: BOS (from the model config) + prompt, continued greedily until EOS or
// `tokens`; returns the prompt and its continuation as text (without the EOS).
#pragma once

#include <cstdint>
#include <string>

#include "data/tokenizer.h"
#include "model/causal_lm.h"

namespace rp::train {

std::string greedySample(model::CausalLM& model, const data::Tokenizer& tokenizer, const std::string& prompt,
                         std::int64_t tokens);

}  // namespace rp::train
