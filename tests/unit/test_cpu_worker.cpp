// The emulated copy stream: weight uploads go in chunks, and an urgent (activation) copy runs before every
// weight chunk still queued — the priority rule of the transfer engine. The chunked queue itself is shared with
// the CUDA backend, so its ordering and failure rules are tested here once.
#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <cstring>
#include <future>
#include <memory>
#include <mutex>
#include <numeric>
#include <string>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

#include "common/error.h"
#include "device/copy_queue.h"
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
  engine.copyBulk(weights, dst.data(), src.data(), src.size(), nullptr);  // chunks of 4, 4, 4, 2
  {
    // The copy thread is busy with the first weight chunk; three more are queued.
    std::unique_lock<std::mutex> lock(mutex);
    cv.wait(lock, [&] { return !order.empty(); });
  }
  auto urgent = engine.copyUrgent(urgentDst.data(), urgentSrc.data(), urgentSrc.size());
  // A download after a mark (Note [Gradient marks]) is as urgent.
  std::vector<std::uint8_t> markedSrc{5, 6}, markedDst(2, 0);
  auto marked = engine.copyUrgentAfter(markedDst.data(), markedSrc.data(), markedSrc.size(), *engine.mark());
  {
    std::lock_guard<std::mutex> lock(mutex);
    release = true;
  }
  cv.notify_all();
  urgent.wait();
  marked.wait();
  weights.wait();
  EXPECT_TRUE(weights.done());
  EXPECT_EQ(dst, src);
  EXPECT_EQ(urgentDst, urgentSrc);
  EXPECT_EQ(markedDst, markedSrc);
  const std::vector<std::pair<bool, std::size_t>> expected{{false, 4}, {true, 3},  {true, 2},
                                                           {false, 4}, {false, 4}, {false, 2}};
  EXPECT_EQ(order, expected);
}

// Note [Slow worker]: at a quarter speed, the compute between two marks takes (at least) four times as long,
// and the marks measure it so; a speed outside (0, 1] is refused.
TEST(CpuWorker, ASlowedWorkerStretchesTheComputeItsMarksTime) {
  WorkerOptions options;
  options.computeSpeed = 0.25;
  CpuWorker worker(options);
  const auto scope = worker.enterCompute();
  const auto from = worker.mark();
  const auto until = std::chrono::steady_clock::now() + std::chrono::milliseconds(20);
  while (std::chrono::steady_clock::now() < until) {
  }
  const auto to = worker.mark();
  EXPECT_GE(worker.elapsedMs(*from, *to), 80.0);
  for (const double speed : {0.0, 1.5}) {
    options.computeSpeed = speed;
    EXPECT_THROW(CpuWorker{options}, InputError) << speed;
  }
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

// What a chunked queue's backend and callbacks did, in order, from any thread; and the bytes two submissions
// copy: 10 (three chunks of at most 4) and 3.
struct QueueRecord {
  std::mutex mutex;
  std::vector<std::string> events;
  void log(std::string e) {
    std::lock_guard<std::mutex> lock(mutex);
    events.push_back(std::move(e));
  }
  std::vector<std::uint8_t> src = std::vector<std::uint8_t>{1, 2, 3, 4, 5, 6, 7, 8, 9, 10};
  std::vector<std::uint8_t> dst = std::vector<std::uint8_t>(10, 0), dst2 = std::vector<std::uint8_t>(3, 0);
};

// What the CUDA backend relies on: chunks in order, one at a time, a submission's `before` ahead of its first
// chunk, and a failing `before` failing that submission only.
TEST(ChunkedCopyQueue, RunsBeforeThenChunksInOrderAndConfinesAFailure) {
  QueueRecord r;
  auto log = [&](std::string e) { r.log(std::move(e)); };
  auto &src = r.src, &dst = r.dst, &dst2 = r.dst2;
  const std::vector<std::string>& events = r.events;
  Ticket first, failed, third;
  {
    ChunkedCopyQueue queue(4, 1, [&](void* d, const void* s, std::size_t n) {
      log("chunk " + std::to_string(n));
      std::memcpy(d, s, n);
      return ChunkedCopyQueue::Landing();  // landed as issued
    });
    queue.submit(first, dst.data(), src.data(), src.size(), [&] { log("before 1"); });
    queue.submit(failed, dst2.data(), src.data(), 3, [&]() -> void {
      log("before 2");
      throw SystemError("cudaStreamWaitEvent failed");
    });
    queue.submit(third, dst2.data(), src.data(), 3);  // no `before`: unaffected by the failure above
    first.wait();
    EXPECT_THROW(failed.wait(), SystemError);
    third.wait();
  }
  EXPECT_EQ(dst, src);
  EXPECT_EQ(dst2, std::vector<std::uint8_t>(src.begin(), src.begin() + 3));
  const std::vector<std::string> expected{"before 1", "chunk 4", "chunk 4", "chunk 2", "before 2", "chunk 3"};
  EXPECT_EQ(events, expected);
}

// Note [Chunks in flight]: with two chunks on the link the thread issues the next chunk before the previous one
// has landed, never has more than two issued and not landed, completes a ticket only once its last chunk has
// landed, and a chunk that fails to land fails its own ticket only. The fake backend copies the bytes when the
// landing is awaited, as a device's copy lands after its issue.
TEST(ChunkedCopyQueue, KeepsTwoChunksOnTheLinkAndCompletesATicketOnlyOnceItsChunksLanded) {
  QueueRecord r;
  auto log = [&](std::string e) { r.log(std::move(e)); };
  auto &src = r.src, &dst = r.dst, &dst2 = r.dst2;
  const std::vector<std::string>& events = r.events;
  Ticket first, failing;
  std::promise<void> gate;  // holds the first chunk until both submissions are queued
  std::shared_future<void> opened = gate.get_future().share();
  int onLink = 0, mostOnLink = 0, chunk = 0;
  {
    ChunkedCopyQueue queue(4, 2, [&](void* d, const void* s, std::size_t n) -> ChunkedCopyQueue::Landing {
      const int id = chunk++;
      log("issue " + std::to_string(id));
      mostOnLink = std::max(mostOnLink, ++onLink);
      return [&, d, s, n, id] {
        if (id == 3) throw SystemError("cudaEventSynchronize (weights) returned 700");
        log("land " + std::to_string(id) + (first.done() ? " (first done)" : ""));
        std::memcpy(d, s, n);
        --onLink;
      };
    });
    queue.submit(first, dst.data(), src.data(), src.size(), [&] { opened.wait(); });
    queue.submit(failing, dst2.data(), src.data(), 3);
    gate.set_value();
    first.wait();
    EXPECT_EQ(dst, src) << "the wait returned before every chunk had landed";
    EXPECT_THROW(failing.wait(), SystemError);
  }
  const std::vector<std::string> expected{"issue 0", "issue 1", "land 0", "issue 2", "land 1", "issue 3", "land 2"};
  EXPECT_EQ(events, expected) << "chunk 1 goes before chunk 0 lands, chunk 2 only after it, and the first "
                                 "ticket is not done before its last chunk lands";
  EXPECT_EQ(mostOnLink, 2);
}

// A backend's completion that can never arrive (a CUDA stream after a device fault) surfaces through the
// ticket's health check as an error, not as a wait forever; a healthy slow completion still just completes.
TEST(Ticket, AWaitEndsWithTheHealthCheckError) {
  Ticket stuck;
  stuck.add();  // never completed
  int checks = 0;
  stuck.setHealthCheck([&] {
    if (++checks == 2) throw SystemError("cudaStreamQuery on CUDA device 0 returned 700 (cudaErrorIllegalAddress)");
  });
  EXPECT_THROW(stuck.wait(), SystemError);
  EXPECT_EQ(checks, 2);

  Ticket slow;
  slow.add();
  slow.setHealthCheck([] {});
  std::thread completer([&] {
    std::this_thread::sleep_for(Ticket::kHealthPeriod * 3);
    slow.complete();
  });
  slow.wait();
  completer.join();
  EXPECT_TRUE(slow.done());
}

// Note [Prefetch while the device computes]: a wait that runs something meanwhile runs it while the ticket is
// pending, until it returns false, and returns once the ticket completes; a done ticket runs nothing.
TEST(Ticket, AWaitRunsItsMeanwhileUntilItReturnsFalseOrTheTicketCompletes) {
  using std::chrono::microseconds;
  // Each completer waits for the meanwhile's calls to reach a count, then for the ticket's health check, which
  // the wait runs once it has waited kHealthPeriod (events, bounded by a generous timeout), before it completes
  // its ticket, so nothing here depends on how fast this machine is. A wait still calling its meanwhile calls
  // it right after the health check, before it can see the completion: one call too many.
  auto completeAfter = [](Ticket& ticket, std::atomic<int>& calls, int count) {
    auto checked = std::make_shared<std::atomic<bool>>(false);
    ticket.setHealthCheck([checked] { *checked = true; });
    return std::thread([&ticket, &calls, count, checked] {
      const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
      while (calls.load() < count && std::chrono::steady_clock::now() < deadline) std::this_thread::yield();
      *checked = false;
      while (!*checked && std::chrono::steady_clock::now() < deadline) std::this_thread::yield();
      ticket.complete();
    });
  };
  Ticket ticket;
  ticket.add();
  std::atomic<int> calls{0};
  std::thread completer = completeAfter(ticket, calls, 3);
  ticket.wait([&] { return ++calls < 3; }, microseconds(100));  // the third call gives up trying
  EXPECT_TRUE(ticket.done()) << "returned before the ticket completed";
  EXPECT_EQ(calls.load(), 3);
  completer.join();

  Ticket slow;
  slow.add();
  std::atomic<int> tries{0};
  std::thread slowCompleter = completeAfter(slow, tries, 10);
  slow.wait([&] { return ++tries > 0; }, microseconds(100));  // keeps trying until the ticket completes
  EXPECT_TRUE(slow.done());
  EXPECT_GE(tries.load(), 10) << "stopped trying while the ticket was pending";
  slowCompleter.join();

  int none = 0;
  Ticket().wait([&] { return ++none > 0; }, microseconds(100));
  EXPECT_EQ(none, 0) << "a done ticket ran its meanwhile";
}

// A meanwhile that never gives up (sync: the next step's weights wait for the gradients being downloaded) does
// not keep a wait on a faulted device from ending: the health check runs meanwhile, every kHealthPeriod. Were it
// skipped, the ticket would be completed after 5 s, without an error.
TEST(Ticket, AWaitWithAMeanwhileEndsWithTheHealthCheckError) {
  Ticket stuck;
  stuck.add();
  std::atomic<int> checks{0};
  stuck.setHealthCheck([&] {
    if (++checks == 2) throw SystemError("cudaStreamQuery on CUDA device 0 returned 700 (cudaErrorIllegalAddress)");
  });
  std::promise<void> ended;
  std::thread rescue([&, waited = ended.get_future()] {  // against a hang: completes the ticket, without an error
    if (waited.wait_for(std::chrono::seconds(5)) == std::future_status::timeout) stuck.complete();
  });
  int tries = 0;
  EXPECT_THROW(stuck.wait([&] { return ++tries > 0; }, std::chrono::microseconds(100)), SystemError);
  EXPECT_EQ(checks, 2);
  EXPECT_GT(tries, 100) << "the meanwhile ran until the check failed";
  ended.set_value();
  rescue.join();
}

// throwIfFailed never blocks: nothing on a pending ticket, the first error once a piece failed. The CPU's
// computeAfter (the compute waits for its input) rethrows a copy's error the same way.
TEST(Ticket, ThrowIfFailedRethrowsWithoutWaiting) {
  Ticket pending;
  pending.add();
  EXPECT_NO_THROW(pending.throwIfFailed());
  pending.complete(std::make_exception_ptr(SystemError("the copy failed")));
  EXPECT_THROW(pending.throwIfFailed(), SystemError);
  CpuWorker worker({});
  EXPECT_THROW(worker.computeAfter(pending), SystemError);
  EXPECT_NO_THROW(worker.computeAfter(Ticket()));
  EXPECT_TRUE(Ticket().deviceEvents().empty()) << "the CPU's copies need none";
}

TEST(ChunkedCopyQueue, AThreadThatCannotStartFailsEveryCopy) {
  std::vector<std::uint8_t> src(8, 1), dst(8, 0);
  Ticket t;
  {
    ChunkedCopyQueue queue(
        4, 1,
        [](void* d, const void* s, std::size_t n) {
          std::memcpy(d, s, n);
          return ChunkedCopyQueue::Landing();
        },
        [] { throw SystemError("cudaSetDevice on CUDA device 3 returned 101"); });
    queue.submit(t, dst.data(), src.data(), src.size());
    EXPECT_THROW(t.wait(), SystemError);
  }
  EXPECT_EQ(dst, std::vector<std::uint8_t>(8, 0));
}

}  // namespace
}  // namespace rp::device
