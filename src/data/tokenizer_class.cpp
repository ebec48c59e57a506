#include "data/tokenizer_class.h"

#include <nlohmann/json.hpp>

namespace rp::data {

std::string applyTokenizerClass(nlohmann::json& tokenizer, const nlohmann::json& config) {
  using nlohmann::json;
  const std::string name = config.value("tokenizer_class", "");
  if (name != "LlamaTokenizer" && name != "LlamaTokenizerFast") return "";
  // transformers' LlamaTokenizer.__init__: add_prefix_space defaults to true, legacy to false.
  const bool addPrefixSpace = config.contains("add_prefix_space") && config.at("add_prefix_space").is_boolean()
                                  ? config.at("add_prefix_space").get<bool>()
                                  : true;
  const bool legacy = config.value("legacy", false);
  tokenizer["normalizer"] = nullptr;
  tokenizer["pre_tokenizer"] = {{"type", "Metaspace"},
                                {"replacement", "\u2581"},
                                {"prepend_scheme", addPrefixSpace ? (legacy ? "always" : "first") : "never"},
                                {"split", false}};
  json decoders = json::array({{{"type", "Replace"}, {"pattern", {{"String", "\u2581"}}}, {"content", " "}},
                               {{"type", "ByteFallback"}},
                               {{"type", "Fuse"}}});
  if (addPrefixSpace) decoders.push_back({{"type", "Strip"}, {"content", " "}, {"start", 1}, {"stop", 0}});
  tokenizer["decoder"] = {{"type", "Sequence"}, {"decoders", decoders}};
  json& model = tokenizer["model"];
  model["fuse_unk"] = true;
  model["byte_fallback"] = true;
  model["ignore_merges"] = false;
  model["unk_token"] = nullptr;  // its BPE has none: a character without a token or byte tokens is dropped
  return name;
}

}  // namespace rp::data
