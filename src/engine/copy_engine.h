// The CPU backend's emulated copy stream (docs/schedule.md, "Transfers"): one copy thread per worker with two
// queues. Activation copies are urgent: they always run before any queued weight copy. Weight uploads are
// split into chunks of at most `chunkBytes`, so an urgent copy waits for at most one chunk — the reference's
// rule that weight prefetch never delays critical-path activations. The CUDA backend maps the same two
// queues onto its upload streams.
// Thread-safety: submit/wait from the worker's main thread; the copies run on the copy thread.
#pragma once

#include <condition_variable>
#include <cstddef>
#include <deque>
#include <exception>
#include <functional>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

namespace rp::engine {

class CopyEngine {
 public:
  // A set of submitted copies; done() when all have run.
  class Ticket {
   public:
    bool done() const;
    void wait() const;  // rethrows a copy's error

   private:
    friend class CopyEngine;
    struct State;
    std::shared_ptr<State> state_;
  };

  explicit CopyEngine(std::size_t chunkBytes);
  ~CopyEngine();
  CopyEngine(const CopyEngine&) = delete;
  CopyEngine& operator=(const CopyEngine&) = delete;

  // Copies `bytes` from `src` to `dst` ahead of every queued weight copy.
  Ticket copyUrgent(void* dst, const void* src, std::size_t bytes);
  // Queues a weight copy of `bytes` as chunks of at most chunkBytes, behind urgent copies.
  void copyWeights(Ticket& ticket, void* dst, const void* src, std::size_t bytes);
  Ticket newTicket();

  // Test hook: every copy first calls this with (urgent, bytes).
  void setObserver(std::function<void(bool, std::size_t)> observer) { observer_ = std::move(observer); }

 private:
  struct Item {
    void* dst;
    const void* src;
    std::size_t bytes;
    std::shared_ptr<Ticket::State> ticket;
  };
  void loop();
  void enqueue(bool urgent, Item item);

  std::size_t chunkBytes_;
  std::function<void(bool, std::size_t)> observer_;
  std::mutex mutex_;
  std::condition_variable cv_;
  std::deque<Item> urgent_, weights_;
  bool stop_ = false;
  std::thread thread_;
};

}  // namespace rp::engine
