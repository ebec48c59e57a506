// Byte-pair-encoding merge loop over one word, as Hugging Face tokenizers' BPE model runs it:
// repeatedly merge the adjacent pair with the lowest merge rank (leftmost first on ties).
#pragma once

#include <cstdint>
#include <string>
#include <unordered_map>
#include <vector>

namespace rp::data {

struct PairHash {
  std::size_t operator()(const std::pair<std::int32_t, std::int32_t>& p) const noexcept {
    return std::hash<std::uint64_t>()((static_cast<std::uint64_t>(static_cast<std::uint32_t>(p.first)) << 32) |
                                      static_cast<std::uint32_t>(p.second));
  }
};

struct MergeRule {
  std::int32_t rank;
  std::int32_t result;  // id of the merged symbol
};

using MergeTable = std::unordered_map<std::pair<std::int32_t, std::int32_t>, MergeRule, PairHash>;

// `symbols` are the initial symbol ids of a word; returns the ids after all merges apply. `lengths`, when given,
// holds each initial symbol's length in bytes and is replaced by each returned token's.
std::vector<std::int32_t> applyMerges(std::vector<std::int32_t> symbols, const MergeTable& merges,
                                      std::vector<std::uint32_t>* lengths = nullptr);

}  // namespace rp::data
