// tokenizer.json (data/tokenizer.h): the BPE model, normalizers, pre-tokenizers, added tokens, decoders; the
// loaded tokenizer then encodes and decodes a fixed text.
#include <nlohmann/json.hpp>

#include "data/tokenizer.h"
#include "fuzz_target.h"

namespace rp::fuzz {

void fuzzOne(std::string_view data) {
  const auto tokenizer = data::Tokenizer::fromFile(writeScratch("tokenizer.json", data));
  const auto ids = tokenizer.encode("Once upon a time, 3 cats said \"héllo\" <|end|>\n\tbye", true);
  (void)tokenizer.decode(ids);
}

// The fixture's tokenizer with its vocabulary cut to the byte tokens and the merges among them (a small seed
// the fuzzer can run thousands of times a second), and a byte-level one like Qwen's.
void writeSeeds(const std::string& dir) {
  using nlohmann::json;
  if (const auto fixtures = fixturesDir(); !fixtures.empty()) {
    json j = json::parse(readFile(fixtures + "/models/tinystories-656k/tokenizer.json"));
    json vocab = json::object();
    for (const auto& [piece, id] : j["model"]["vocab"].items()) {
      if (id.get<int>() < 300) vocab[piece] = id;
    }
    json merges = json::array();
    for (const auto& m : j["model"]["merges"]) {
      const std::string text =
          m.is_string() ? m.get<std::string>() : m[0].get<std::string>() + " " + m[1].get<std::string>();
      const auto space = text.find(' ');
      if (space == std::string::npos) continue;
      const std::string a = text.substr(0, space), b = text.substr(space + 1);
      if (vocab.contains(a) && vocab.contains(b) && vocab.contains(a + b)) merges.push_back(m);
    }
    j["model"]["vocab"] = vocab;
    j["model"]["merges"] = merges;
    writeSeed(dir, "tinystories-cut.json", j.dump(1));
  }
  writeSeed(dir, "bytelevel.json", R"({"version":"1.0","added_tokens":[{"id":7,"content":"<|end|>","special":true,
"normalized":false}],"normalizer":{"type":"NFC"},"pre_tokenizer":{"type":"Sequence","pretokenizers":[{"type":"Split",
"pattern":{"Regex":"(?i:'s|'t)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s+"},"behavior":"Isolated",
"invert":false},{"type":"ByteLevel","add_prefix_space":false,"trim_offsets":false,"use_regex":false}]},
"post_processor":{"type":"ByteLevel"},"decoder":{"type":"ByteLevel"},"model":{"type":"BPE","dropout":null,
"unk_token":null,"byte_fallback":false,"ignore_merges":false,"vocab":{"a":0,"b":1,"c":2,"ab":3,"Ġ":4,"Ġa":5,"abc":6},
"merges":["a b","Ġ a",["ab","c"]]}})");
}

}  // namespace rp::fuzz
