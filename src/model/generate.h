// Greedy decoding without a KV cache (recomputes the prefix each step): a correctness tool for demos
// and tests, not a serving path.
#pragma once

#include <cstdint>
#include <vector>

#include "model/causal_lm.h"

namespace rp::model {

// Appends up to `maxNewTokens` argmax tokens to `prompt`, stopping after `eosTokenId` (if >= 0).
// Returns only the new tokens.
std::vector<std::int64_t> generateGreedy(CausalLM& model, const std::vector<std::int64_t>& prompt,
                                         std::int64_t maxNewTokens, std::int64_t eosTokenId);

}  // namespace rp::model
