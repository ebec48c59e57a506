// Attention over packed documents on the device (model/attention.h): ATen's variable-length flash kernel in
// bfloat16 and float16, with and without a sliding window, and the per-document path in float32, against the
// dense masked reference computed in float32 from the same inputs; and a whole microbatch over packed documents
// that never waits for the device.
#include <gtest/gtest.h>

#include <c10/cuda/CUDAFunctions.h>

#include <cmath>
#include <exception>
#include <string>
#include <vector>

#include "gpu_skip.h"
#include "model/attention.h"
#include "model/batch.h"
#include "model/causal_lm.h"
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

// Note [Nothing read back per microbatch] on the device: one microbatch of a small dense model in bfloat16 over
// packed documents (the varlen flash kernel) — embedding, decoder layers, the streamed loss and the backward —
// with LibTorch's synchronisation check set to throw, so any operator that waits for the GPU (a value read, a copy
// to the host, an output sized by values) fails the test. A first pass unchecked: the kernels' first use may set
// things up. The CPU tier checks the operators called (test_model_layers.cpp, NothingIsReadBackFromTheDevice).
TEST(GpuAttention, AMicrobatchNeverWaitsForTheDevice) {
  RP_SKIP_WITHOUT_GPU();
  ModelConfig c;
  c.arch = Architecture::kQwen3;
  c.qkNorm = true;
  c.vocabSize = 512;
  c.hiddenSize = 256;
  c.intermediateSize = 512;
  c.numLayers = 2;
  c.numHeads = 4;
  c.numKvHeads = 2;
  c.headDim = 64;
  c.maxPositions = 1024;
  CausalLM model(c, torch::kBFloat16);
  torch::manual_seed(5);
  initRandom(model);
  const torch::Device cuda(torch::kCUDA, 0);
  model.to(cuda);
  const std::int64_t T = 512;
  const std::vector<std::vector<std::int64_t>> lengths{{1, 100, 7, 300, 104}, {200, 312}};
  Batch host = causalBatch(torch::randint(c.vocabSize, {2, T}, torch::kInt64));
  host.segmentIds = test::segments(lengths, T);
  std::vector<torch::Tensor> positions;  // restarting at each document, as the packer numbers them
  for (const auto& row : lengths) {
    std::vector<torch::Tensor> documents;
    for (const auto length : row) documents.push_back(torch::arange(length));
    positions.push_back(torch::cat(documents));
  }
  host.positionIds = torch::stack(positions);
  const auto ctx = toDevice(model.rotary().context(host, torch::kBFloat16), cuda);  // made on the host
  const auto batch = toDevice(host, cuda);
  const auto microbatch = [&] {
    auto h = model.embedding().forward(batch.inputIds);
    for (std::int64_t i = 0; i < model.numDecoderLayers(); ++i) h = model.decoderLayer(i).forward(h, ctx);
    auto loss = model.head().loss(h, batch.targets, /*chunkTokens=*/256);
    loss.sum.backward();
    return loss.sum.detach();
  };
  ASSERT_STREQ(attentionKernel(torch::empty({2, 4, T, 64}, torch::TensorOptions(torch::kBFloat16).device(cuda)),
                               ctx.documents, AttendOptions{}),
               "varlen_flash");
  microbatch();
  model.zero_grad();
  auto& check = c10::cuda::warning_state();
  check.set_sync_debug_mode(c10::cuda::SyncDebugMode::L_ERROR);
  torch::Tensor loss;
  std::string error;
  try {
    loss = microbatch();
  } catch (const std::exception& e) {
    error = e.what();
  }
  check.set_sync_debug_mode(c10::cuda::SyncDebugMode::L_DISABLED);
  ASSERT_TRUE(error.empty()) << "the microbatch waited for the device: " << error.substr(0, 2000);
  EXPECT_TRUE(std::isfinite(loss.item<double>()));
}

}  // namespace
}  // namespace rp::model
