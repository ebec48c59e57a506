// Attention over packed documents on the device (model/attention.h): ATen's variable-length flash kernel in
// bfloat16 and float16, with and without a sliding window, and the per-document path in float32, against the
// dense masked reference computed in float32 from the same inputs.
#include <gtest/gtest.h>

#include <cmath>

#include "gpu_skip.h"
#include "model/attention.h"
#include "model/batch.h"
#include "model/libtorch.h"
#include "support/attention_reference.h"

namespace rp::model {
namespace {

struct Case {
  torch::ScalarType dtype;
  std::int64_t window;
  const char* kernel;
  double outputTolerance, gradientTolerance;  // relative to the reference's largest entry
};

void expectEqualsReference(const Case& c) {
  SCOPED_TRACE(std::string(c10::toString(c.dtype)) + ", window " + std::to_string(c.window));
  torch::manual_seed(3);
  const std::int64_t B = 2, H = 8, Hkv = 2, T = 512, D = 64;
  const auto ids = test::segments({{1, 100, 7, 300, 104}, {512}}, T);
  AttentionContext ctx;
  ctx.documents = Documents::of(ids, B, T);
  ctx = toDevice(ctx, torch::Device(torch::kCUDA, 0));
  const auto on = torch::TensorOptions().device(torch::kCUDA, 0).dtype(c.dtype);
  auto q = torch::randn({B, H, T, D}, on).requires_grad_();
  auto k = torch::randn({B, Hkv, T, D}, on).requires_grad_();
  auto v = torch::randn({B, Hkv, T, D}, on).requires_grad_();
  const AttendOptions o{.scale = 1.0 / std::sqrt(static_cast<double>(D)), .window = c.window, .sinks = {}};
  ASSERT_STREQ(attentionKernel(q, ctx.documents, o), c.kernel);

  const auto out = attend(q, k, v, ctx.documents, o);
  const auto upstream = torch::randn(out.sizes(), on);
  const auto grads = torch::autograd::grad({out}, {q, k, v}, {upstream});

  const auto f32 = [](const torch::Tensor& x) { return x.detach().to(torch::kFloat).requires_grad_(); };
  auto qf = f32(q), kf = f32(k), vf = f32(v);
  const auto ref = test::denseAttention(qf, kf, vf, ids.to(torch::kCUDA), o);
  const auto refGrads = torch::autograd::grad({ref}, {qf, kf, vf}, {upstream.to(torch::kFloat)});
  const auto relative = [](const torch::Tensor& a, const torch::Tensor& b) {
    return (a.to(torch::kFloat) - b).abs().max().item<double>() / b.abs().max().item<double>();
  };
  EXPECT_LE(relative(out, ref), c.outputTolerance);
  for (int n = 0; n < 3; ++n) EXPECT_LE(relative(grads[n], refGrads[n]), c.gradientTolerance) << "gradient " << n;
}

TEST(GpuAttention, VarlenFlashEqualsTheMaskedReference) {
  RP_SKIP_WITHOUT_GPU();
  expectEqualsReference({torch::kBFloat16, 0, "varlen_flash", 2e-2, 3e-2});
  expectEqualsReference({torch::kHalf, 0, "varlen_flash", 3e-3, 5e-3});
  expectEqualsReference({torch::kBFloat16, 128, "varlen_flash", 2e-2, 3e-2});
}

TEST(GpuAttention, PerDocumentInFloat32EqualsTheMaskedReference) {
  RP_SKIP_WITHOUT_GPU();
  expectEqualsReference({torch::kFloat, 0, "per_document", 1e-5, 1e-5});
}

}  // namespace
}  // namespace rp::model
