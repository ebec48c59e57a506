// MXFP4 expert weights, as GPT-OSS checkpoints are published (docs/moe.md, "GPT-OSS"): a stacked expert
// tensor `W` [E, K, N] is stored as `W_blocks` [E, N, K/32, 16] (uint8, two 4-bit E2M1 codes per byte, the
// low nibble first) and `W_scales` [E, N, K/32] (uint8, a power-of-two exponent biased by 127, one per 32
// values). Loading dequantizes them exactly as transformers' convert_moe_packed_tensors does; every value is
// an E2M1 number times a power of two, so bfloat16 and float32 hold it exactly.
#pragma once

#include <torch/types.h>

#include "model/safetensors.h"

namespace rp::model {

// Fills `param` [E, K, N] from the stored blocks and scales, one expert at a time (bounded scratch memory).
// Shapes that do not fit `param` are InputErrors naming the file and tensor.
void dequantizeMxfp4(const safetensors::TensorView& blocks, const safetensors::TensorView& scales,
                     torch::Tensor param);

}  // namespace rp::model
