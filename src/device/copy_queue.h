// Bulk copies (weight uploads, prefetch) on a thread of their own, in chunks of at most `chunkBytes`, at most
// `inFlight` chunks issued and not yet landed: the next chunk is issued while the previous ones are still on the
// link (no idle gap between two chunks), and a copy submitted urgently on another path waits behind at most
// `inFlight` chunks on a link both share (the reference's priority rule, docs/schedule.md "Transfers";
// Note [Chunks in flight]). Shared by the backends: each supplies how one chunk is issued and how to wait for
// it to land.
// Thread-safety: submit from any one thread; chunks run on the queue's thread.
#pragma once

#include <condition_variable>
#include <cstddef>
#include <deque>
#include <exception>
#include <functional>
#include <memory>
#include <mutex>
#include <thread>

#include "device/worker.h"

namespace rp::device {

class ChunkedCopyQueue {
 public:
  // Waits until an issued chunk has landed (throws on failure); empty where the chunk landed as it was issued.
  using Landing = std::function<void()>;
  // Issues one chunk (throws on failure) and says how to wait for it.
  using IssueChunk = std::function<Landing(void* dst, const void* src, std::size_t bytes)>;
  // `onStart` runs first on the queue's thread (a CUDA backend selects its device there).
  ChunkedCopyQueue(std::size_t chunkBytes, int inFlight, IssueChunk issue, std::function<void()> onStart = {});
  ~ChunkedCopyQueue();  // finishes what is queued
  ChunkedCopyQueue(const ChunkedCopyQueue&) = delete;
  ChunkedCopyQueue& operator=(const ChunkedCopyQueue&) = delete;

  // Queues `bytes` from `src` to `dst` as chunks, each adding to `ticket` and completing it once landed.
  // `before`, if given, runs on the queue's thread before the first chunk is issued (a CUDA backend: the copy
  // stream waits for the compute that may still read the memory the copy overwrites); an error there fails
  // every chunk.
  void submit(Ticket& ticket, void* dst, const void* src, std::size_t bytes, std::function<void()> before = {});
  std::size_t chunkBytes() const { return chunkBytes_; }

 private:
  struct Submission {  // shared by its chunks
    std::function<void()> before;
    std::exception_ptr error;  // of `before`: fails every chunk
  };
  struct Item {
    void* dst;
    const void* src;
    std::size_t bytes;
    Ticket ticket;
    std::shared_ptr<Submission> submission;
  };
  struct Issued {
    Landing landing;
    Ticket ticket;
  };
  void loop();
  void issue(Item& item, std::exception_ptr startError, std::deque<Issued>& issued);

  const std::size_t chunkBytes_;
  const std::size_t inFlight_;
  IssueChunk issue_;
  std::function<void()> onStart_;
  std::mutex mutex_;
  std::condition_variable cv_;
  std::deque<Item> items_;
  bool stop_ = false;
  std::thread thread_;
};

}  // namespace rp::device
