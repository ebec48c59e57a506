// A tokenized corpus: documents as runs of token ids in one array, with an optional per-token loss mask.
// The same layout is the on-disk pre-tokenized format (docs/data.md), written by roundpipe_tokenize.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <utility>
#include <vector>

namespace rp::data {

struct TokenizedCorpus {
  std::vector<std::int32_t> tokens;
  std::vector<std::uint64_t> docOffsets{0};  // document d is tokens[docOffsets[d], docOffsets[d+1])
  std::vector<std::uint8_t> trainMask;       // empty = every token is a training target

  std::size_t documentCount() const { return docOffsets.size() - 1; }
  std::span<const std::int32_t> document(std::size_t d) const {
    return {tokens.data() + docOffsets[d], tokens.data() + docOffsets[d + 1]};
  }
  bool trainable(std::size_t tokenIndex) const { return trainMask.empty() || trainMask[tokenIndex] != 0; }
  // Appends one document; `mask` is empty (all trainable) or one flag per token.
  void add(const std::vector<std::int32_t>& ids, const std::vector<std::uint8_t>& mask);
};

// Pre-tokenized directory: tokens.bin (int32 LE), docs.bin (uint64 LE offsets, documents + 1),
// mask.bin (uint8 per token, optional), meta.json (format version, counts, tokenizer, vocab size).
void saveCorpus(const TokenizedCorpus& corpus, const std::string& directory, const std::string& tokenizerPath,
                std::int64_t vocabSize);
// Loads and validates (sizes agree, offsets monotone, ids < vocab size); errors name the file.
TokenizedCorpus loadCorpus(const std::string& directory);

// Holds out round(fraction x documents) documents, chosen by a permutation seeded with `seed`, at least one
// and leaving at least one: {the rest, in their order; the held-out ones, in their order}.
std::pair<TokenizedCorpus, TokenizedCorpus> holdOut(const TokenizedCorpus& corpus, double fraction, std::uint64_t seed);

inline constexpr int kCorpusFormatVersion = 1;

}  // namespace rp::data
