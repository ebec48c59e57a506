#include "model/mxfp4.h"

#include "common/error.h"
#include "model/libtorch.h"
#include "model/torch_bridge.h"

namespace rp::model {
namespace {

// The 16 E2M1 values a 4-bit code stands for (sign bit high), as transformers' FP4_VALUES.
constexpr float kE2M1[16] = {+0.0f, +0.5f, +1.0f, +1.5f, +2.0f, +3.0f, +4.0f, +6.0f,
                             -0.0f, -0.5f, -1.0f, -1.5f, -2.0f, -3.0f, -4.0f, -6.0f};

}  // namespace

void dequantizeMxfp4(const safetensors::TensorView& blocks, const safetensors::TensorView& scales,
                     torch::Tensor param) {
  const auto E = param.size(0), K = param.size(1), N = param.size(2);
  const std::vector<std::int64_t> blockShape{E, N, K / 32, 16}, scaleShape{E, N, K / 32};
  if (K % 32 != 0 || blocks.shape != blockShape || scales.shape != scaleShape) {
    RP_THROW(InputError,
             "{}: MXFP4 tensors '{}' [{}] and '{}' [{}] do not hold a [{}, {}, {}] expert tensor (expected [{}] and "
             "[{}])",
             *blocks.file, blocks.name, fmt::join(blocks.shape, ", "), scales.name, fmt::join(scales.shape, ", "), E,
             K, N, fmt::join(blockShape, ", "), fmt::join(scaleShape, ", "));
  }
  if (blocks.dtype != safetensors::DType::kU8 || scales.dtype != safetensors::DType::kU8) {
    RP_THROW(InputError, "{}: MXFP4 tensors '{}' ({}) and '{}' ({}) must be U8", *blocks.file, blocks.name,
             safetensors::dtypeName(blocks.dtype), scales.name, safetensors::dtypeName(scales.dtype));
  }
  const auto lut = torch::from_blob(const_cast<float*>(kE2M1), {16}, torch::kFloat);
  const auto allBlocks = toTorch(blocks);
  const auto exponents = toTorch(scales).to(torch::kInt32) - 127;
  for (std::int64_t e = 0; e < E; ++e) {
    const auto codes = allBlocks[e];  // [N, K/32, 16]
    const auto low = lut.index({codes.bitwise_and(0x0F).to(torch::kLong)});
    const auto high = lut.index({codes.bitwise_right_shift(4).to(torch::kLong)});
    const auto values = torch::stack({low, high}, -1).view({N, K / 32, 32});
    const auto scaled = torch::ldexp(values, exponents[e].unsqueeze(-1)).view({N, K});
    param[e].copy_(scaled.t());
  }
}

}  // namespace rp::model
