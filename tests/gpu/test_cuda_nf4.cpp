// Note [Packed NF4] on a real device: a packed NF4 buffer uploaded as bytes dequantizes on the GPU to the CPU's
// float32 values exactly (the same lookups and one multiply per value, and per scale with double quantisation),
// and a bfloat16 projection over it computes the CPU's float32 product within bfloat16 rounding, forward and
// backward.
#include <gtest/gtest.h>

#include "gpu_skip.h"
#include "model/libtorch.h"
#include "model/nf4.h"

namespace rp::model {
namespace {

TEST(CudaNf4, APackedWeightDequantizesOnTheDeviceAsOnTheCpu) {
  RP_SKIP_WITHOUT_GPU();
  torch::manual_seed(11);
  const torch::Device gpu(torch::kCUDA, 0);
  for (bool doubleQuant : {false, true}) {
    SCOPED_TRACE(doubleQuant ? "double quant" : "single quant");
    const Nf4Packing packing{{1024, 640}, doubleQuant};
    auto packed = torch::empty({packing.bytes()}, torch::kUInt8);
    packNf4(quantizeNf4(torch::randn({1024, 640}), doubleQuant), packing, packed);
    const auto onGpu = packed.to(gpu);
    EXPECT_TRUE(torch::equal(dequantizePacked(onGpu, packing).cpu(), dequantizePacked(packed, packing)));

    const auto x = torch::randn({4, 96, 640});
    const auto xGpu = x.to(gpu, torch::kBFloat16).requires_grad_(true);
    const auto y = linearNf4(xGpu, onGpu, packing, torch::Tensor());
    const auto weight = dequantizePacked(packed, packing);
    const auto xRef = x.clone().requires_grad_(true);
    const auto yRef = torch::linear(xRef, weight);
    const auto g = torch::randn_like(yRef);
    y.backward(g.to(gpu, torch::kBFloat16));
    yRef.backward(g);
    auto relative = [](const torch::Tensor& a, const torch::Tensor& ref) {
      return ((a.cpu().to(torch::kFloat) - ref).abs().max() / ref.abs().max()).item<double>();
    };
    EXPECT_LT(relative(y, yRef), 2e-2) << "forward";
    EXPECT_LT(relative(xGpu.grad(), xRef.grad()), 2e-2) << "input gradient";
  }
}

}  // namespace
}  // namespace rp::model
