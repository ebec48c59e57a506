#include "data/packer.h"

#include <algorithm>
#include <numeric>
#include <random>

#include "common/error.h"

namespace rp::data {

std::int64_t PackedRow::targetCount() const {
  return std::count_if(targets.begin(), targets.end(), [](std::int32_t t) { return t != kNoTarget; });
}

Packer::Packer(const TokenizedCorpus& corpus, std::int64_t seqLen, std::uint64_t seed, DataCursor cursor)
    : corpus_(corpus), seqLen_(seqLen), seed_(seed), cursor_(cursor) {
  if (corpus.tokens.empty()) RP_THROW(InputError, "the dataset has no tokens (every record empty or skipped?)");
  RP_CHECK(seqLen > 0, "seqLen must be positive, got {}", seqLen);
  shuffleFor(cursor_.epoch);
  RP_CHECK(cursor_.docInOrder >= 0 && static_cast<std::size_t>(cursor_.docInOrder) < order_.size(),
           "cursor document {} outside the {} documents", cursor_.docInOrder, order_.size());
}

// Fisher–Yates with mt19937_64 seeded by (seed, epoch): identical on every platform and library
// (std::shuffle's algorithm is implementation-defined).
void Packer::shuffleFor(std::int64_t epoch) {
  if (orderEpoch_ == epoch) return;
  order_.resize(corpus_.documentCount());
  std::iota(order_.begin(), order_.end(), 0);
  std::mt19937_64 rng(seed_ * 0x9E3779B97F4A7C15ull + static_cast<std::uint64_t>(epoch));
  for (std::size_t i = order_.size(); i > 1; --i) {
    const std::size_t j = static_cast<std::size_t>(rng() % i);
    std::swap(order_[i - 1], order_[j]);
  }
  orderEpoch_ = epoch;
}

PackedRow Packer::next() {
  PackedRow row;
  row.inputIds.reserve(static_cast<std::size_t>(seqLen_));
  std::int32_t segment = 0;
  while (static_cast<std::int64_t>(row.inputIds.size()) < seqLen_) {
    const std::size_t doc = order_[static_cast<std::size_t>(cursor_.docInOrder)];
    const auto begin = corpus_.docOffsets[doc];
    const auto length = static_cast<std::int64_t>(corpus_.docOffsets[doc + 1] - begin);
    const std::int64_t take =
        std::min(length - cursor_.tokenOffset, seqLen_ - static_cast<std::int64_t>(row.inputIds.size()));
    for (std::int64_t i = 0; i < take; ++i) {
      const std::int64_t inDoc = cursor_.tokenOffset + i;
      const std::size_t at = static_cast<std::size_t>(begin) + static_cast<std::size_t>(inDoc);
      row.inputIds.push_back(corpus_.tokens[at]);
      row.positions.push_back(static_cast<std::int32_t>(i));
      row.segments.push_back(segment);
      const bool hasNext = inDoc + 1 < length && corpus_.trainable(at + 1);
      row.targets.push_back(hasNext ? corpus_.tokens[at + 1] : kNoTarget);
    }
    ++segment;
    cursor_.tokenOffset += take;
    if (cursor_.tokenOffset == length) {
      cursor_.tokenOffset = 0;
      if (static_cast<std::size_t>(++cursor_.docInOrder) == order_.size()) {
        cursor_.docInOrder = 0;
        shuffleFor(++cursor_.epoch);
      }
    }
  }
  ++cursor_.rowsEmitted;
  return row;
}

std::vector<PackedRow> Packer::next(std::int64_t rows) {
  std::vector<PackedRow> out;
  out.reserve(static_cast<std::size_t>(rows));
  for (std::int64_t i = 0; i < rows; ++i) out.push_back(next());
  return out;
}

std::vector<PackedRow> shardRows(const std::vector<PackedRow>& stepRows, int rank, int worldSize) {
  const auto n = static_cast<int>(stepRows.size());
  if (worldSize < 1 || rank < 0 || rank >= worldSize) {
    RP_THROW(InputError, "shardRows: rank {} outside a world of {}", rank, worldSize);
  }
  if (n % worldSize != 0) {
    RP_THROW(InputError, "{} rows per step do not divide evenly over {} data-parallel replicas", n, worldSize);
  }
  const int per = n / worldSize;
  return {stepRows.begin() + rank * per, stepRows.begin() + (rank + 1) * per};
}

}  // namespace rp::data
