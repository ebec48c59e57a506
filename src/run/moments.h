// AdamW's moments in checkpoints, for the trainer and the pipeline's optimizer alike (docs/checkpoint-format.md):
// float32 moments as exp_avg / exp_avg_sq (/ max_exp_avg_sq), 8-bit ones (optim/blockwise8.h) as their codes and
// absmax; and a resume in the other width converted (Note [Moments across widths]).
// Thread-safety: one instance per optimizer, used by the thread that saves or restores it.
#pragma once

#include <cstddef>
#include <cstdint>
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
  // a tensor whose moments the checkpoint holds in the other width reads them into staging, which finish() converts.
  void add(optim::AdamW& adamw, std::size_t param, const std::string& name, const std::vector<std::int64_t>& shape,
           std::size_t begin, std::size_t end, const checkpoint::Manifest* saved, std::vector<checkpoint::Slice>& out);
  // After checkpoint::readSlices: the staged moments into the optimizer's width; how many tensors were converted.
  std::size_t finish();

 private:
  struct Staged {
    optim::AdamW* adamw;
    std::size_t param, n;
    std::size_t skip = 0;  // dequantizing: the elements of the first block before the part
    bool toEightBit;       // float32 read, quantized; else codes and absmax read, dequantized
    std::vector<float> m, v;
    std::vector<std::uint8_t> codesM, codesV;
    std::vector<float> absmaxM, absmaxV;
  };
  std::vector<Staged> staged_;
};

// Whether `saved` holds tensor `name`'s moments as 8-bit codes (else as float32, or not at all).
bool savedEightBit(const checkpoint::Manifest& saved, const std::string& name);

}  // namespace rp::run
