// Decoding without a KV cache (recomputes the prefix each step): greedy or temperature / top-p sampling, for
// samples during training, roundpipe_generate and tests; not a serving path.
#pragma once

#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include <ATen/core/Tensor.h>

#include "data/chat_template.h"
#include "data/tokenizer.h"
#include "model/causal_lm.h"

namespace rp::model {

struct Sampling {
  double temperature = 0.0;  // 0: greedy (argmax); else logits / temperature, softmax, then top-p
  double topP = 1.0;         // nucleus: the fewest most likely tokens whose probability reaches topP
  std::uint64_t seed = 0;
};

// The next token from one position's logits (a 1-D tensor over the vocabulary), drawn with `rng` unless greedy.
// Top-p keeps, as transformers' TopPLogitsWarper does, the most likely tokens until their cumulative probability
// exceeds topP (at least one).
std::int64_t nextToken(const at::Tensor& logits, const Sampling& sampling, std::mt19937_64& rng);

// Appends up to `maxNewTokens` tokens to `prompt`, stopping after any of `stopIds`. Returns only the new tokens.
std::vector<std::int64_t> generate(CausalLM& model, const std::vector<std::int64_t>& prompt, std::int64_t maxNewTokens,
                                   const std::vector<std::int64_t>& stopIds, const Sampling& sampling);

// A text sample. Plain: BOS (from the model config) + prompt, continued until EOS or `tokens`; returns the prompt
// and its continuation (without the EOS). With `chat` (a template): the prompt as one user turn rendered with the
// generation prompt, continued until EOS or a special token of the tokenizer; returns the reply. Leaves the
// model's train/eval mode as it found it.
std::string sampleText(CausalLM& model, const data::Tokenizer& tokenizer, const std::string& prompt,
                       std::int64_t tokens, const Sampling& sampling, const data::ChatTemplate* chat = nullptr);

}  // namespace rp::model
