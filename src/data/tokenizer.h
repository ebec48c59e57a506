// A Hugging Face tokenizer.json, implemented in C++ for the models we support: BPE models, SentencePiece-style
// (Prepend/Replace normalizers, byte fallback, unknown-token fusion) and byte-level (NFC, Split/ByteLevel
// pre-tokenizers); added tokens split out of the text (with their lstrip/rstrip/single_word), a TemplateProcessing
// post-processor and the matching decoders. Anything else in the file is rejected with an InputError naming the
// component (docs/tokenizer.md).
// Thread-safety: immutable after construction; encode/decode may run concurrently.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "data/aligned_text.h"

namespace rp::data {

// Token ids with, for each, the span of the input text it covers (HF's offsets, in bytes).
struct Encoding {
  std::vector<std::int32_t> ids;
  std::vector<Span> spans;
};

class Tokenizer {
 public:
  // kTransformers: as transformers' AutoTokenizer loads the model directory, with the pipeline its tokenizer class
  // (tokenizer_config.json beside the file) builds (data/tokenizer_class.h); kFile: tokenizer.json as HF tokenizers'
  // Tokenizer.from_file reads it.
  enum class Pipeline { kTransformers, kFile };
  // Loads <path> (a tokenizer.json file, or a directory containing one).
  static Tokenizer fromFile(const std::string& path, Pipeline pipeline = Pipeline::kTransformers);
  ~Tokenizer();
  Tokenizer(Tokenizer&&) noexcept;
  Tokenizer& operator=(Tokenizer&&) noexcept;

  // Ids as Hugging Face `tokenizer.encode(text, add_special_tokens=addSpecial)` returns them.
  std::vector<std::int32_t> encode(std::string_view text, bool addSpecialTokens = true) const;
  // `encode(text, false)` with the span of `text` each token came from: an added token's includes the whitespace
  // it strips; tokens of text a normalizer rewrote share the rewritten characters' span.
  Encoding encodeWithSpans(std::string_view text) const;
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
