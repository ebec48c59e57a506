// NF4, the 4-bit NormalFloat of QLoRA (Dettmers et al. 2023), stored as bitsandbytes stores it (docs/model.md,
// "NF4 bases"): a weight is cut into blocks of 64 values in row-major order; each block keeps its absmax
// (float32) and each value the index of the nearest of 16 NF4 code values to value / absmax (ties to the lower
// code), two indices per byte, the first value in the high nibble. With double quantisation the absmax are
// themselves stored as 8-bit codes of (absmax - offset), offset their mean, in blocks of 256 with one float32
// absmax each, over bitsandbytes' signed dynamic map (ties to the lower code as well). Quantising here gives the
// same bytes as bitsandbytes' quantize_4bit on the CPU (tests/golden: against a checkpoint transformers saved),
// and dequantising the same float32 values as its dequantize_4bit.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <torch/types.h>

#include "model/safetensors.h"

namespace rp::model {

inline constexpr std::int64_t kNf4BlockSize = 64;

struct Nf4Tensor {
  std::vector<std::int64_t> shape;
  std::int64_t blocksize = kNf4BlockSize;
  torch::Tensor codes;         // uint8 [ceil(numel / 2)]
  torch::Tensor absmax;        // float32 [blocks]; undefined when nested
  bool nested = false;         // double quantisation:
  torch::Tensor absmaxCodes;   // uint8 [blocks]
  torch::Tensor nestedAbsmax;  // float32 [ceil(blocks / 256)]
  torch::Tensor nestedMap;     // float32 [256]
  float offset = 0;
};

// `weight` (any float dtype, quantised from its float32 values) in NF4 with blocks of 64.
Nf4Tensor quantizeNf4(const torch::Tensor& weight, bool doubleQuant);
// The float32 values an NF4 tensor stands for, in its shape.
torch::Tensor dequantizeNf4(const Nf4Tensor& q);
// bitsandbytes' signed 8-bit dynamic map (create_dynamic_map()), over which double quantisation stores absmax.
torch::Tensor dynamicMap();

// Note [Packed NF4]: QLoRA's base (lora.base_dtype = "nf4") keeps each quantised weight as one byte buffer —
// in the node store, in a stage slot, in the single-process trainer's model — laid out as
//   codes (ceil(n / 2) bytes) | pad to 4 | absmax (float32 per block of 64)
// or, double-quantised,
//   codes | absmax codes (a byte per block) | pad to 4 | nested absmax (float32 per 256 blocks) | offset
//   (float32) | nested map (256 float32)
// so every path that moves bytes (uploads, slots, the host-memory check, the planner's stage bytes) moves
// the 4-bit form unchanged. A projection dequantizes it into the compute dtype for each product and drops it
// after (linearNf4).
struct Nf4Packing {
  std::vector<std::int64_t> shape;  // of the weight it stands for
  bool doubleQuant = false;
  std::int64_t numel() const;
  std::int64_t bytes() const;  // of the buffer
};
// `q` (blocks of 64, nested as `into` says) written into `into`: a CPU uint8 tensor of into.bytes() bytes.
void packNf4(const Nf4Tensor& q, const Nf4Packing& packing, torch::Tensor into);
// The float32 values a packed buffer stands for, on the buffer's device, in packing.shape; no host
// synchronisation (the CUDA tier runs it there).
torch::Tensor dequantizePacked(const torch::Tensor& packed, const Nf4Packing& packing);
// y = x W^T (+ bias), W the packed weight dequantized into x's dtype for the product and dropped after it; the
// backward dequantizes it again for x's gradient (as bitsandbytes' MatMul4Bit). The weight and the bias are
// frozen: they get no gradient.
torch::Tensor linearNf4(const torch::Tensor& x, const torch::Tensor& packed, const Nf4Packing& packing,
                        const torch::Tensor& bias);

// Whether the Hugging Face tensor `name` is one an NF4 base stores quantised: every linear weight of the
// decoder layers — the attention (Qwen3.5's Gated DeltaNet's too) and dense MLP projections, the modules transformers'
// bitsandbytes integration converts; not the embedding, the LM head, the norms, biases, a MoE router or the stacked
// experts (parameters, not Linear modules, in transformers 5).
bool nf4Linear(const std::string& name);

// Whether a bitsandbytes checkpoint stores `name` quantised (4-bit NF4 or FP4, or 8-bit).
bool storedQuantized(const safetensors::CheckpointReader& reader, const std::string& name);
// A tensor a bitsandbytes 4-bit checkpoint stores as NF4: `name` (packed U8) with `name.absmax`,
// `name.quant_map`, `name.quant_state.bitsandbytes__nf4` (JSON: quant_type, blocksize, shape, nested_offset)
// and, double-quantised, `name.nested_absmax` and `name.nested_quant_map`. An InputError naming the file and
// the tensor where it is stored otherwise (FP4, 8-bit) or not whole. `used` gets every stored name read.
Nf4Tensor readBnb4bit(const safetensors::CheckpointReader& reader, const std::string& name,
                      std::vector<std::string>& used);

}  // namespace rp::model
