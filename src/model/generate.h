// Greedy decoding without a KV cache (recomputes the prefix each step): a correctness tool for demos
// and tests, not a serving path.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "data/tokenizer.h"
#include "model/causal_lm.h"

namespace rp::model {

// Appends up to `maxNewTokens` argmax tokens to `prompt`, stopping after `eosTokenId` (if >= 0).
// Returns only the new tokens.
std::vector<std::int64_t> generateGreedy(CausalLM& model, const std::vector<std::int64_t>& prompt,
                                         std::int64_t maxNewTokens, std::int64_t eosTokenId);

// A greedy text sample: BOS (from the model config) + prompt, continued greedily until EOS or `tokens`;
// returns the prompt and its continuation as text (without the EOS). Leaves the model's train/eval mode as
// it found it.
std::string greedySample(CausalLM& model, const data::Tokenizer& tokenizer, const std::string& prompt,
                         std::int64_t tokens);

}  // namespace rp::model
