// A Hugging Face tokenizer.json, implemented in C++ for the models we support.
// This first part covers SentencePiece-style BPE (Llama-2 family, the TinyStories fixture): Prepend/Replace
// normalizers, no pre-tokenizer, byte fallback, unknown-token fusion, special tokens split out of the text,
// a TemplateProcessing post-processor and the matching decoder. Anything else in the file is rejected with
// an InputError naming the component (docs/tokenizer.md).
// Thread-safety: immutable after construction; encode/decode may run concurrently.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

namespace rp::data {

class Tokenizer {
 public:
  // Loads <path> (a tokenizer.json file, or a directory containing one).
  static Tokenizer fromFile(const std::string& path);
  ~Tokenizer();
  Tokenizer(Tokenizer&&) noexcept;
  Tokenizer& operator=(Tokenizer&&) noexcept;

  // Ids as Hugging Face `tokenizer.encode(text, add_special_tokens=addSpecial)` returns them.
  std::vector<std::int32_t> encode(std::string_view text, bool addSpecialTokens = true) const;
  // Text as `tokenizer.decode(ids, skip_special_tokens=skipSpecial)` returns it. Like HF tokenizers, the
  // skip covers added tokens marked special and not "normalized".
  std::string decode(const std::vector<std::int32_t>& ids, bool skipSpecialTokens = true) const;

  std::int32_t vocabSize() const;
  // The tokenizer.json it was loaded from.
  const std::string& path() const;
  // The contents of its special added tokens (e.g. "<|im_end|>", "</s>"), longest first.
  std::vector<std::string> specialTokens() const;
  // -1 when the token is not in the vocabulary.
  std::int32_t tokenId(const std::string& token) const;

 private:
  struct Impl;
  explicit Tokenizer(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace rp::data
