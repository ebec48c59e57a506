// AdamW's moments in checkpoints, for the trainer and the pipeline's optimizer alike (docs/checkpoint-format.md):
// float32 moments as exp_avg / exp_avg_sq (/ max_exp_avg_sq), 8-bit ones (optim/blockwise8.h) as their codes and
// absmax; and a resume in the other width converted (Note [Moments across widths]).
// Thread-safety: one instance per optimizer, used by the thread that saves or restores it.
#pragma once

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <string>
#include <vector>

#include "checkpoint/manifest.h"
#include "checkpoint/slices.h"
#include "optim/adamw.h"

namespace rp::run {

class MomentSlices {
 public:
  // Appends the slices of AdamW parameter `param`'s moments to `out`: it holds elements [begin, end) of tensor
  // `name` of `shape` (an 8-bit parameter's `begin` a multiple of optim::q8::kBlock). With `saved` (a restore),
  // a tensor whose moments the checkpoint holds in the other width is left to convert() instead.
  void add(optim::AdamW& adamw, std::size_t param, const std::string& name, const std::vector<std::int64_t>& shape,
           std::size_t begin, std::size_t end, const checkpoint::Manifest* saved, std::vector<checkpoint::Slice>& out);
  // After checkpoint::readSlices of the others: the moments add() left, read from checkpoint `dir` (`saved` its
  // manifest) a chunk at a time into the optimizer's width; how many parts were converted.
  std::size_t convert(const std::filesystem::path& dir, const checkpoint::Manifest& saved);

 private:
  struct Pending {
    optim::AdamW* adamw;
    std::size_t param;
    std::string name;
    std::vector<std::int64_t> shape;
    std::size_t begin, end;
  };
  std::vector<Pending> pending_;
};

// Whether `saved` holds tensor `name`'s moments as 8-bit codes (else as float32, or not at all).
bool savedEightBit(const checkpoint::Manifest& saved, const std::string& name);

}  // namespace rp::run
