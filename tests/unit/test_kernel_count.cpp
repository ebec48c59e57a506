// Note [Kernel counts]: the kernels a stretch of ops launches, counted from the ops the dispatcher runs, on the
// emulated device's meta tensors. The expected counts are what CUDA launches for these ops: one kernel an
// elementwise op, a matmul (cuBLAS's GEMM), a copy; none a view or an allocation.
#include <functional>
#include <string>

#include <gtest/gtest.h>

#include "engine/kernel_count.h"
#include "model/attention.h"
#include "model/libtorch.h"

namespace rp::engine {
namespace {

torch::Tensor meta(at::IntArrayRef sizes, bool grad = false) {
  return torch::empty(sizes, torch::TensorOptions().device(torch::kMeta).dtype(torch::kBFloat16)).requires_grad_(grad);
}

// The kernels `ops` launch, by name, space-separated.
std::string kernelsOf(const std::function<void()>& ops) {
  const KernelCount count;
  ops();
  std::string names;
  for (const auto& op : count.ops()) names += (names.empty() ? "" : " ") + op;
  EXPECT_EQ(static_cast<std::size_t>(count.kernels()), count.ops().size());
  return names;
}

TEST(KernelCount, AnElementwiseOpAMatmulAndACopyAreOneKernelEach) {
  const auto a = meta({64, 32}), b = meta({64, 32}), w = meta({16, 32}), bias = meta({16});
  EXPECT_EQ(kernelsOf([&] { (void)(a + b); }), "aten::add");
  EXPECT_EQ(kernelsOf([&] { (void)a.mul(b).add_(b); }), "aten::mul aten::add_");  // an in-place op writes: a kernel
  EXPECT_EQ(kernelsOf([&] { (void)torch::linear(a, w); }), "aten::mm");           // linear -> t + matmul -> mm
  EXPECT_EQ(kernelsOf([&] { (void)torch::linear(a, w, bias); }), "aten::addmm");  // linear -> t + addmm
  EXPECT_EQ(kernelsOf([&] { (void)a.clone(); }), "aten::copy_");                  // empty_like + copy_
  EXPECT_EQ(kernelsOf([&] { (void)a.to(torch::kFloat); }), "aten::copy_");        // _to_copy -> empty_strided + copy_
}

TEST(KernelCount, ViewsAndAllocationsAreNone) {
  const auto a = meta({64, 32});
  EXPECT_EQ(kernelsOf([&] {
              (void)a.transpose(0, 1).reshape({64, 32}).unsqueeze(0).narrow(1, 0, 8);
            }),
            "aten::copy_");  // the reshape of a transposed tensor copies it; the rest are views
  EXPECT_EQ(kernelsOf([&] { (void)a.view({32, 64}).select(0, 3).unsqueeze(0); }), "");
  EXPECT_EQ(kernelsOf([&] { (void)torch::empty_like(a); }), "");
  EXPECT_EQ(kernelsOf([&] { (void)a.contiguous(); }), "");  // already contiguous: itself
  EXPECT_EQ(kernelsOf([&] { (void)a.to(torch::kBFloat16); }), "");
  EXPECT_EQ(kernelsOf([&] { (void)a.size(0); }), "");
}

TEST(KernelCount, OnlyTheOpsWhileTheCountLivesAreCounted) {
  const auto a = meta({8, 8});
  (void)(a + a);
  {
    const KernelCount count;
    (void)(a * a);
    EXPECT_EQ(count.kernels(), 1);
    (void)(a - a);
    EXPECT_EQ(count.kernels(), 2);
  }
  (void)(a + a);
  EXPECT_EQ(kernelsOf([&] { (void)a.neg(); }), "aten::neg");  // a new count starts at 0
}

TEST(KernelCount, ABackwardOnMetaTensorsIsCountedOnTheCallingThread) {
  const auto x = meta({16, 32}, /*grad=*/true), w = meta({8, 32}, /*grad=*/true);
  const auto y = torch::linear(x, w).sum();
  const auto seed = torch::ones_like(y);
  // The sum's backward expands (a view); the matmul's backward is two products, a gradient per input; the
  // transpose's backward is a view, and the leaves take their first gradients without a copy.
  EXPECT_EQ(kernelsOf([&] { y.backward(seed); }), "aten::mm aten::mm");
}

TEST(KernelCount, TheEmulatedFlashAttentionIsOneKernelForwardAndOneBackward) {
  const auto q = meta({1, 4, 64, 16}, true), k = meta({1, 2, 64, 16}, true), v = meta({1, 2, 64, 16}, true);
  model::Documents documents;
  documents.offsets = {0, 32, 64};  // two documents in one row: the varlen kernel, one call
  documents.seqLen = 64;
  documents.longest = 32;
  ASSERT_STREQ(model::attentionKernel(q, documents, {}), "meta_flash");
  torch::Tensor out;
  EXPECT_EQ(kernelsOf([&] { out = model::attend(q, k, v, documents, {0.25, 0, {}}); }), "rp::meta_flash_forward");
  const auto grad = meta(out.sizes());
  // The backward: the flash kernel's (grouped heads natively: the key and value gradients come out at their
  // heads); the output's transpose back is a view.
  EXPECT_EQ(kernelsOf([&] { out.backward(grad); }), "rp::meta_flash_backward");
}

}  // namespace
}  // namespace rp::engine
