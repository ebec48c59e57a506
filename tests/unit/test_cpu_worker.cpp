// The emulated copy stream: weight uploads go in chunks, and an urgent (activation) copy runs before every
// weight chunk still queued — the priority rule of the transfer engine.
#include <algorithm>
#include <condition_variable>
#include <cstdint>
#include <mutex>
#include <numeric>
#include <vector>

#include <gtest/gtest.h>

#include "device/cpu/cpu_worker.h"

namespace rp::device {
namespace {

TEST(CpuWorker, UrgentCopiesOvertakeQueuedWeightChunks) {
  CpuWorker engine(WorkerOptions{/*chunkBytes=*/4});
  std::mutex mutex;
  std::condition_variable cv;
  bool release = false;
  std::vector<std::pair<bool, std::size_t>> order;
  engine.setObserver([&](bool urgent, std::size_t bytes) {
    std::unique_lock<std::mutex> lock(mutex);
    order.emplace_back(urgent, bytes);
    cv.notify_all();
    if (order.size() == 1) cv.wait(lock, [&] { return release; });  // hold the first weight chunk
  });
  std::vector<std::uint8_t> src(14), dst(14, 0), urgentSrc(3, 7), urgentDst(3, 0);
  std::iota(src.begin(), src.end(), 1);
  Ticket weights;
  engine.copyBulk(weights, dst.data(), src.data(), src.size());  // chunks of 4, 4, 4, 2
  {
    // The copy thread is busy with the first weight chunk; three more are queued.
    std::unique_lock<std::mutex> lock(mutex);
    cv.wait(lock, [&] { return !order.empty(); });
  }
  auto urgent = engine.copyUrgent(urgentDst.data(), urgentSrc.data(), urgentSrc.size());
  {
    std::lock_guard<std::mutex> lock(mutex);
    release = true;
  }
  cv.notify_all();
  urgent.wait();
  weights.wait();
  EXPECT_TRUE(weights.done());
  EXPECT_EQ(dst, src);
  EXPECT_EQ(urgentDst, urgentSrc);
  const std::vector<std::pair<bool, std::size_t>> expected{{false, 4}, {true, 3}, {false, 4}, {false, 4}, {false, 2}};
  EXPECT_EQ(order, expected);
}

TEST(CpuWorker, AllocatesZeroedAlignedMemoryThatLivesWithItsHolders) {
  CpuWorker worker(WorkerOptions{});
  std::shared_ptr<void> memory = worker.allocate(1000);
  ASSERT_NE(memory, nullptr);
  EXPECT_EQ(reinterpret_cast<std::uintptr_t>(memory.get()) % 64, 0u);
  const auto* bytes = static_cast<const std::uint8_t*>(memory.get());
  EXPECT_EQ(std::count(bytes, bytes + 1000, 0), 1000);
  std::shared_ptr<void> holder = memory;  // a second holder (a tensor's storage, in the engine)
  memory.reset();
  static_cast<std::uint8_t*>(holder.get())[999] = 7;  // still valid (ASan would report a use after free)
  EXPECT_EQ(static_cast<std::uint8_t*>(holder.get())[999], 7);
}

}  // namespace
}  // namespace rp::device
