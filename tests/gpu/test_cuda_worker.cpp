// The CUDA worker on a real device: its memory, the urgent/bulk copy paths with the overtaking rule (an
// activation-sized copy issued behind >= 1 GiB of queued weight chunks completes before them), host
// registration, compute marks, the memory numbers the planner reads and the hand-off rings.
#include <cuda_runtime.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <numeric>
#include <thread>
#include <vector>

#include "common/error.h"
#include "device/worker.h"
#include "gpu_skip.h"

namespace rp::device {
namespace {

std::unique_ptr<Worker> cudaWorker(std::size_t chunkBytes = 64u << 20) {
  return makeWorker(Backend::kCuda, WorkerOptions{chunkBytes, 0});
}

TEST(CudaWorker, CopiesRoundTripThroughDeviceMemory) {
  RP_SKIP_WITHOUT_GPU();
  auto worker = cudaWorker(/*chunkBytes=*/1000);  // several chunks
  EXPECT_EQ(worker->placement().backend, Backend::kCuda);
  const std::size_t n = 10'000;
  std::vector<std::uint8_t> host(n), back(n, 0), urgentBack(n, 0);
  std::iota(host.begin(), host.end(), 0);
  auto memory = worker->allocate(n);
  Ticket up;
  worker->copyBulk(up, memory.get(), host.data(), n, nullptr);
  up.wait();
  worker->copyUrgent(back.data(), memory.get(), n).wait();
  EXPECT_EQ(back, host);
  std::vector<std::uint8_t> other(n, 42);
  worker->copyUrgent(memory.get(), other.data(), n).wait();
  worker->copyUrgent(urgentBack.data(), memory.get(), n).wait();
  EXPECT_EQ(urgentBack, other);
}

TEST(CudaWorker, AllocatesZeroedDeviceMemory) {
  RP_SKIP_WITHOUT_GPU();
  auto worker = cudaWorker();
  auto memory = worker->allocate(4096);
  cudaPointerAttributes attr{};
  ASSERT_EQ(cudaPointerGetAttributes(&attr, memory.get()), cudaSuccess);
  EXPECT_EQ(attr.type, cudaMemoryTypeDevice);
  std::vector<std::uint8_t> back(4096, 1);
  worker->copyUrgent(back.data(), memory.get(), back.size()).wait();
  EXPECT_EQ(std::count(back.begin(), back.end(), 0), 4096);
}

// A hand-off ring (the device-direct tensor channel): a producer writes a slot on its compute stream, a consumer
// worker opens the ring by its handle and reads the slot after the slot's event; each slot holds its own
// bytes. Both workers in one process, so the consumer reads the owner's pointer and events (across processes:
// gpu.pipeline_direct).
TEST(CudaWorker, HandoffRingSlotsRoundTripToAnotherWorker) {
  RP_SKIP_WITHOUT_GPU();
  auto producer = cudaWorker();
  auto consumer = cudaWorker();
  const std::size_t n = 1 << 20;
  auto ring = producer->shareRing(2, n);
  auto peer = consumer->openRing(ring->handle());
  auto src = producer->allocate(n);
  auto dst = consumer->allocate(n);
  for (int slot = 0; slot < 2; ++slot) {
    std::vector<std::uint8_t> host(n, static_cast<std::uint8_t>(10 + slot));
    producer->copyUrgent(src.get(), host.data(), n).wait();
    ring->write(slot, src.get(), n);
  }
  for (int slot = 1; slot >= 0; --slot) {
    std::vector<std::uint8_t> back(n, 0);
    peer->read(slot, dst.get(), n).wait();
    consumer->copyUrgent(back.data(), dst.get(), n).wait();
    EXPECT_EQ(std::count(back.begin(), back.end(), static_cast<std::uint8_t>(10 + slot)), static_cast<long>(n))
        << "slot " << slot;
  }
  EXPECT_THROW(peer->read(2, dst.get(), n), InternalError);
}

// The overtaking rule: weights go two chunks at a time (Note [Chunks in flight]; stream priorities do not order
// copies), so an urgent copy issued behind 1 GiB of queued weight chunks lands while most of them are still queued.
TEST(CudaWorker, UrgentCopyOvertakesAGibibyteOfQueuedWeightChunks) {
  RP_SKIP_WITHOUT_GPU();
  constexpr std::size_t kWeights = 1ull << 30, kChunk = 64ull << 20, kActivation = 16ull << 20;
  auto worker = cudaWorker(kChunk);
  auto weights = worker->allocate(kWeights);
  auto activation = worker->allocate(kActivation);
  std::vector<std::uint8_t> hostWeights(kWeights, 3), hostActivation(kActivation, 5);
  auto pinW = worker->pinHost(hostWeights.data(), kWeights, "test weights");
  auto pinA = worker->pinHost(hostActivation.data(), kActivation, "test activation");
  Ticket bulk;
  const auto start = std::chrono::steady_clock::now();
  worker->copyBulk(bulk, weights.get(), hostWeights.data(), kWeights, nullptr);
  Ticket urgent = worker->copyUrgent(activation.get(), hostActivation.data(), kActivation);
  urgent.wait();
  const double urgentMs = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
  const bool weightsStillQueued = !bulk.done();
  bulk.wait();
  const double allMs = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
  EXPECT_TRUE(weightsStillQueued) << "the activation waited for all 1 GiB of weights";
  EXPECT_LT(urgentMs, allMs / 4) << "activation " << urgentMs << " ms, weights " << allMs << " ms";
  std::vector<std::uint8_t> check(kActivation, 0);
  worker->copyUrgent(check.data(), activation.get(), kActivation).wait();
  EXPECT_EQ(check, hostActivation);
}

TEST(CudaWorker, PinsHostMemoryUntilTheHandleGoes) {
  RP_SKIP_WITHOUT_GPU();
  auto worker = cudaWorker();
  std::vector<std::uint8_t> host(1 << 20);
  cudaPointerAttributes attr{};
  {
    auto pin = worker->pinHost(host.data(), host.size(), "test buffer");
    ASSERT_NE(pin, nullptr) << "cudaHostRegister failed (see the warning above)";
    auto again = worker->pinHost(host.data(), host.size(), "test buffer");  // a second rank in this process
    ASSERT_EQ(cudaPointerGetAttributes(&attr, host.data()), cudaSuccess);
    EXPECT_EQ(attr.type, cudaMemoryTypeHost);
    pin.reset();
    ASSERT_EQ(cudaPointerGetAttributes(&attr, host.data()), cudaSuccess);
    EXPECT_EQ(attr.type, cudaMemoryTypeHost) << "unregistered while another holder remained";
  }
  ASSERT_EQ(cudaPointerGetAttributes(&attr, host.data()), cudaSuccess);
  EXPECT_EQ(attr.type, cudaMemoryTypeUnregistered);
}

TEST(CudaWorker, ReportsFreeMemoryAndComputeTime) {
  RP_SKIP_WITHOUT_GPU();
  auto worker = cudaWorker();
  std::size_t free = 0, total = 0;
  ASSERT_EQ(cudaMemGetInfo(&free, &total), cudaSuccess);
  // At least what the driver reports free (plus what the caching allocator holds unused), never above the card;
  // 256 MiB of slack for other processes on the device.
  constexpr std::size_t kSlack = 256u << 20, kBlock = 1u << 30;
  const std::size_t before = worker->freeMemory();
  EXPECT_GE(before + kSlack, free);
  EXPECT_LE(before, total);
  // 1 GiB taken through the worker is 1 GiB less free.
  auto block = worker->allocate(kBlock);
  const std::size_t after = worker->freeMemory();
  EXPECT_GE(before, after + kBlock - kSlack) << "before " << before << ", after " << after;
  // Two marks 50 ms apart on an idle stream: the device time between them is the host's 50 ms, not 0.
  const auto a = worker->mark();
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  const auto b = worker->mark();
  const double ms = worker->elapsedMs(*a, *b);
  EXPECT_GE(ms, 40.0);
  EXPECT_LT(ms, 5000.0);
}

}  // namespace
}  // namespace rp::device
