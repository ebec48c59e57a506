#include "device/copy_queue.h"

#include <algorithm>
#include <cstdint>

namespace rp::device {

ChunkedCopyQueue::ChunkedCopyQueue(std::size_t chunkBytes, CopyChunk copy, std::function<void()> onStart)
    : chunkBytes_(std::max<std::size_t>(chunkBytes, 1)), copy_(std::move(copy)), onStart_(std::move(onStart)) {
  thread_ = std::thread([this] { loop(); });
}

ChunkedCopyQueue::~ChunkedCopyQueue() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stop_ = true;
  }
  cv_.notify_all();
  thread_.join();
}

void ChunkedCopyQueue::submit(Ticket& ticket, void* dst, const void* src, std::size_t bytes,
                              std::function<void()> before) {
  auto* d = static_cast<std::uint8_t*>(dst);
  const auto* s = static_cast<const std::uint8_t*>(src);
  auto submission = std::make_shared<Submission>(Submission{std::move(before), nullptr});
  {
    std::lock_guard<std::mutex> lock(mutex_);
    std::size_t off = 0;
    do {
      const std::size_t n = std::min(chunkBytes_, bytes - off);
      ticket.add();
      items_.push_back({d + off, s + off, n, ticket, submission});
      off += n;
    } while (off < bytes);
  }
  cv_.notify_all();
}

void ChunkedCopyQueue::loop() {
  std::exception_ptr startError;  // every chunk fails with it
  try {
    if (onStart_) onStart_();
  } catch (...) {
    startError = std::current_exception();
  }
  while (true) {
    Item item;
    {
      std::unique_lock<std::mutex> lock(mutex_);
      cv_.wait(lock, [&] { return stop_ || !items_.empty(); });
      if (items_.empty()) return;  // stop requested and drained
      item = std::move(items_.front());
      items_.pop_front();
    }
    Submission& sub = *item.submission;
    std::exception_ptr error = startError;
    try {
      if (!error && sub.before) {  // the submission's first chunk
        auto before = std::move(sub.before);
        sub.before = nullptr;
        try {
          before();
        } catch (...) {
          sub.error = std::current_exception();
        }
      }
      if (!error) error = sub.error;
      if (!error && item.bytes > 0) copy_(item.dst, item.src, item.bytes);
    } catch (...) {
      error = std::current_exception();
    }
    item.ticket.complete(error);
  }
}

}  // namespace rp::device
