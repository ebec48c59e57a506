// Note [Gradient marks] on a real device: autograd runs the hooks on its own device thread, each layer's mark
// is an event on the worker's compute stream, and a download ordered after a mark lands while compute
// submitted later is still running — where a plain urgent copy waits for all of it.
#include <ATen/cuda/CUDAEvent.h>
#include <c10/cuda/CUDAStream.h>
#include <gtest/gtest.h>
#include <time.h>

#include <chrono>
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

double cpuSeconds(clockid_t clock) {
  timespec t{};
  clock_gettime(clock, &t);
  return static_cast<double>(t.tv_sec) + 1e-9 * static_cast<double>(t.tv_nsec);
}

// Note [Blocking host waits]: a host thread waiting for the device sleeps. The issuing thread's wait for a compute
// mark (elapsedMs) and the copy thread's for each weight chunk's landing spun a core each with the events they
// had; here each costs the host a small part of the time it waits.
TEST(CudaHostWaits, WaitsForTheDeviceSleep) {
  RP_SKIP_WITHOUT_GPU();
  auto worker = device::makeWorker(device::Backend::kCuda, device::WorkerOptions{256u << 20, 0});
  const auto scope = worker->enterCompute();
  const auto on = torch::TensorOptions().device(torch::kCUDA, 0);
  torch::Tensor a = torch::randn({4096, 4096}, on);
  const auto from = worker->mark();
  for (int i = 0; i < 400; ++i) a = torch::matmul(a, a).div_(4096.0);
  const auto to = worker->mark();
  double cpu = cpuSeconds(CLOCK_THREAD_CPUTIME_ID);
  auto start = std::chrono::steady_clock::now();
  const double ms = worker->elapsedMs(*from, *to);
  double wall = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  cpu = cpuSeconds(CLOCK_THREAD_CPUTIME_ID) - cpu;
  ASSERT_GT(wall, 0.1) << "the compute had ended before the wait began (" << ms << " ms of it)";
  EXPECT_LT(cpu, 0.2 * wall) << "elapsedMs spun: " << cpu << " s of CPU in " << wall << " s";

  // 16 GiB of weight chunks from pinned memory: the copy thread waits for each to land while this one waits for
  // the tickets; the process's CPU time stays a small part of the wall time.
  constexpr std::size_t kBytes = 1ull << 30;
  std::vector<std::uint8_t> host(kBytes, 1);
  const auto pinned = worker->pinHost(host.data(), kBytes, "the test's weights");
  ASSERT_NE(pinned, nullptr) << "1 GiB could not be pinned (ulimit -l): pageable copies are staged by the CPU, "
                                "which this case does not measure";
  const auto memory = worker->allocate(kBytes);
  std::vector<device::Ticket> tickets(16);
  cpu = cpuSeconds(CLOCK_PROCESS_CPUTIME_ID);
  start = std::chrono::steady_clock::now();
  for (auto& t : tickets) worker->copyBulk(t, memory.get(), host.data(), kBytes, nullptr);
  for (auto& t : tickets) t.wait();
  wall = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  cpu = cpuSeconds(CLOCK_PROCESS_CPUTIME_ID) - cpu;
  ASSERT_GT(wall, 0.1) << "16 GiB went up too fast to tell";
  EXPECT_LT(cpu, 0.5 * wall) << "the weight uploads' waits spun: " << cpu << " s of CPU in " << wall << " s";
}

}  // namespace
}  // namespace rp::engine
