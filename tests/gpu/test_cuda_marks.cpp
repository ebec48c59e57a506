// Note [Gradient marks] on a real device: autograd runs the hooks on its own device thread, each layer's mark
// is an event on the worker's compute stream, and a download ordered after a mark lands while compute
// submitted later is still running — where a plain urgent copy waits for all of it.
#include <ATen/cuda/CUDAEvent.h>
#include <c10/cuda/CUDAStream.h>
#include <gtest/gtest.h>

#include <vector>

#include "device/worker.h"
#include "engine/gradient_marks.h"
#include "gpu_skip.h"
#include "model/libtorch.h"

namespace rp::engine {
namespace {

TEST(CudaGradientMarks, ALayersGradientsDownloadWhileLaterComputeRuns) {
  RP_SKIP_WITHOUT_GPU();
  auto worker = device::makeWorker(device::Backend::kCuda, device::WorkerOptions{64u << 20, 0});
  const auto scope = worker->enterCompute();
  const auto on = torch::TensorOptions().device(torch::kCUDA, 0);
  torch::Tensor w0 = torch::full({1 << 20}, 2.0, on).requires_grad_(true);
  torch::Tensor w1 = torch::full({1 << 20}, 3.0, on).requires_grad_(true);
  GradientMarks marks({{0, {w0}}, {1, {w1}}}, [&] { return worker->mark(); });
  ((torch::ones({1 << 20}, on) * w0) * w1).sum().backward();
  ASSERT_TRUE(marks.of(0) && marks.of(1)) << "the hooks ran on autograd's device thread and took both marks";

  // Well over a second of compute queued after the backward, then an event at its end.
  torch::Tensor a = torch::randn({4096, 4096}, on);
  for (int i = 0; i < 400; ++i) a = torch::matmul(a, a).div_(4096.0);
  at::cuda::CUDAEvent end;
  end.record(c10::cuda::getCurrentCUDAStream());

  const std::size_t bytes = static_cast<std::size_t>(w1.grad().nbytes());
  std::vector<float> early(static_cast<std::size_t>(w1.numel()), 0.0F), late(early.size(), 0.0F);
  worker->copyUrgentAfter(early.data(), w1.grad().data_ptr(), bytes, *marks.of(1)).wait();
  EXPECT_FALSE(end.query()) << "the download waited for the compute submitted after its mark";
  EXPECT_EQ(early.front(), 2.0F);  // d/dw1 of sum(w0 w1) = w0
  EXPECT_EQ(early.back(), 2.0F);
  worker->copyUrgent(late.data(), w1.grad().data_ptr(), bytes).wait();
  EXPECT_TRUE(end.query()) << "a plain urgent copy waits for all the compute submitted before it";
  EXPECT_EQ(late, early);
}

}  // namespace
}  // namespace rp::engine
