#include "data/tokenizer_class.h"

#include <nlohmann/json.hpp>

namespace rp::data {

std::string applyTokenizerClass(nlohmann::json& tokenizer, const nlohmann::json& config) {
  using nlohmann::json;
  // A field of another type (null, as some configs write) counts as absent, as transformers' defaults take it.
  auto flag = [&](const char* key, bool fallback) {
    const auto it = config.find(key);
    return it != config.end() && it->is_boolean() ? it->get<bool>() : fallback;
  };
  const auto cls = config.find("tokenizer_class");
  const std::string name = cls != config.end() && cls->is_string() ? cls->get<std::string>() : "";
  if (name != "LlamaTokenizer" && name != "LlamaTokenizerFast") return "";
  // transformers' LlamaTokenizer.__init__: add_prefix_space defaults to true, legacy to false.
  const bool addPrefixSpace = flag("add_prefix_space", true);
  const bool legacy = flag("legacy", false);
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
