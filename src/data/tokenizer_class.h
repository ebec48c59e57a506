// The tokenizer transformers loads, where it is not tokenizer.json as written: transformers (5.x) builds some
// tokenizer classes' pipelines itself, taking only the vocabulary, merges, added tokens and post-processor from
// tokenizer.json (docs/tokenizer.md, "What transformers changes").
#pragma once

#include <string>

#include <nlohmann/json_fwd.hpp>

namespace rp::data {

// Rewrites `tokenizer` (a parsed tokenizer.json) as transformers' class named by `config` (the tokenizer_config.json
// beside it, an object) builds it; returns the class name when it changed anything, else "". LlamaTokenizer(Fast)
// (Llama-2, Mistral v0.x, Phi-3): no normalizer, a Metaspace pre-tokenizer (prepend_scheme "first" unless
// `legacy`, "never" without add_prefix_space, no split), its decoder, BPE with byte fallback and no unknown token.
std::string applyTokenizerClass(nlohmann::json& tokenizer, const nlohmann::json& config);

}  // namespace rp::data
