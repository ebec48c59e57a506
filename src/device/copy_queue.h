// Bulk copies (weight uploads, prefetch) on a thread of their own, in chunks of at most `chunkBytes`, one
// chunk at a time: the next chunk is issued only when the previous one has landed, so a copy submitted
// urgently on another path waits behind at most one chunk on a link both share (the reference's priority
// rule, docs/schedule.md "Transfers"). Shared by the backends: each supplies how one chunk is copied.
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
  // Copies one chunk and returns when it has landed (throws on failure).
  using CopyChunk = std::function<void(void* dst, const void* src, std::size_t bytes)>;
  // `onStart` runs first on the queue's thread (a CUDA backend selects its device there).
  ChunkedCopyQueue(std::size_t chunkBytes, CopyChunk copy, std::function<void()> onStart = {});
  ~ChunkedCopyQueue();  // finishes what is queued
  ChunkedCopyQueue(const ChunkedCopyQueue&) = delete;
  ChunkedCopyQueue& operator=(const ChunkedCopyQueue&) = delete;

  // Queues `bytes` from `src` to `dst` as chunks, each adding to `ticket`. `before`, if given, runs on the
  // queue's thread before the first chunk (a CUDA backend: the copy stream waits for the compute submitted
  // so far, which may still read the memory the copy overwrites); an error there fails every chunk.
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
  void loop();

  const std::size_t chunkBytes_;
  CopyChunk copy_;
  std::function<void()> onStart_;
  std::mutex mutex_;
  std::condition_variable cv_;
  std::deque<Item> items_;
  bool stop_ = false;
  std::thread thread_;
};

}  // namespace rp::device
