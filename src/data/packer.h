// Packs a tokenized corpus into fixed-length training rows, deterministically from a seed, resumable from
// a cursor. Documents are visited in a seeded shuffle per epoch and concatenated; a document that does not
// fit is continued in the next row. Every piece of a document in a row is its own segment: positions restart
// at 0 and attention stays inside it (the model's segment mask). Targets are the next token of the same
// document (also across a row break); a document's last token, and tokens whose next token is masked out of
// training, have no target. docs/data.md states the rules.
// Thread-safety: one thread at a time.
#pragma once

#include <cstdint>
#include <vector>

#include "data/corpus.h"

namespace rp::data {

inline constexpr std::int32_t kNoTarget = -100;

struct PackedRow {
  std::vector<std::int32_t> inputIds, targets, positions, segments;  // each seqLen long
  std::int64_t targetCount() const;
};

// Where the packer stands; saving and restoring it resumes the exact row stream.
struct DataCursor {
  std::int64_t epoch = 0;
  std::int64_t docInOrder = 0;   // position in the epoch's shuffled order
  std::int64_t tokenOffset = 0;  // tokens of that document already emitted
  std::int64_t rowsEmitted = 0;
  bool operator==(const DataCursor&) const = default;
};

class Packer {
 public:
  Packer(const TokenizedCorpus& corpus, std::int64_t seqLen, std::uint64_t seed, DataCursor cursor = {});

  PackedRow next();
  std::vector<PackedRow> next(std::int64_t rows);
  const DataCursor& cursor() const { return cursor_; }

 private:
  void shuffleFor(std::int64_t epoch);

  const TokenizedCorpus& corpus_;
  std::int64_t seqLen_;
  std::uint64_t seed_;
  DataCursor cursor_;
  std::vector<std::uint64_t> order_;
  std::int64_t orderEpoch_ = -1;
};

// The rows of a step that belong to `rank` of `worldSize` data-parallel replicas: a contiguous block, so
// replica r gets rows [r*n/W, (r+1)*n/W). Throws InputError when the rows do not divide evenly.
std::vector<PackedRow> shardRows(const std::vector<PackedRow>& stepRows, int rank, int worldSize);

}  // namespace rp::data
