// Hugging Face pre-tokenizers: Split (regex, via ICU), ByteLevel (GPT-2 byte-to-unicode mapping) and Metaspace
// (SentencePiece-style: spaces become "▁"), alone or in a Sequence. Turns normalized text into the words BPE runs on,
// each byte still naming the input it came from.
// Thread-safety: immutable after construction; split() may run concurrently.
#pragma once

#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "data/aligned_text.h"

namespace rp::data {

// Metaspace's prepend_scheme: when the replacement is put before a word.
enum class MetaspacePrepend { kAlways, kFirst, kNever };
// From a Metaspace pre-tokenizer's or decoder's JSON (`prepend_scheme`, or the older `add_prefix_space`).
MetaspacePrepend parseMetaspacePrepend(const nlohmann::json& spec, const std::string& source);

class PreTokenizer {
 public:
  // Builds from the tokenizer.json "pre_tokenizer" object; `source` names the file in errors.
  PreTokenizer(const nlohmann::json& spec, const std::string& source);
  ~PreTokenizer();

  // `startsInput`: the text begins the whole input (Metaspace's prepend_scheme "first" prepends only then).
  std::vector<AlignedText> split(AlignedText text, bool startsInput = true) const;
  bool byteLevel() const { return byteLevel_; }

 private:
  struct Step;
  void add(const nlohmann::json& spec);
  std::string source_;
  std::vector<std::unique_ptr<Step>> steps_;
  bool byteLevel_ = false;
};

// GPT-2's reversible byte <-> printable-unicode mapping used by ByteLevel models.
std::string byteLevelEncode(std::string_view bytes);
// Maps back; characters outside the table are kept as their UTF-8 bytes.
std::string byteLevelDecode(std::string_view mapped);

}  // namespace rp::data
