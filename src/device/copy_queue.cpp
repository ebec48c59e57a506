#include "device/copy_queue.h"

#include <algorithm>
#include <cstdint>
#include <optional>

#include "common/host_cpu.h"

namespace rp::device {

// Note [Chunks in flight]: a backend whose copies are asynchronous (CUDA) keeps two chunks on the link: the
// thread issues chunk i+1 as soon as chunk i is issued and waits for chunk i to land before it issues chunk i+2.
// With one chunk at a time the link idled for a host round trip between chunks (a synchronize's return and the
// next issue: some 10-20 us per chunk); with two it never does. The price is the priority rule's bound: an
// urgent copy queued meanwhile on the same link may wait behind two chunks instead of one. A chunk's piece of
// its ticket completes when it has landed, so a ticket's waiter sees every byte of its copy in place.
ChunkedCopyQueue::ChunkedCopyQueue(std::size_t chunkBytes, int inFlight, IssueChunk issue,
                                   std::function<void()> onStart)
    : chunkBytes_(std::max<std::size_t>(chunkBytes, 1)),
      inFlight_(static_cast<std::size_t>(std::max(inFlight, 1))),
      issue_(std::move(issue)),
      onStart_(std::move(onStart)) {
  thread_ = std::thread([this] {
    const cpu::ThreadRole counted(cpu::Role::kCopies);  // Note [Host CPU by role]
    loop();
  });
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
  std::deque<Issued> issued;  // on the link, oldest first
  while (true) {
    std::optional<Item> item;
    {
      std::unique_lock<std::mutex> lock(mutex_);
      if (issued.empty()) cv_.wait(lock, [&] { return stop_ || !items_.empty(); });
      if (issued.size() < inFlight_ && !items_.empty()) {
        item = std::move(items_.front());
        items_.pop_front();
      } else if (issued.empty()) {
        return;  // stop requested and drained
      }
    }
    if (item) {
      issue(*item, startError, issued);
      continue;
    }
    // The link is full, or nothing more is queued: wait for the oldest chunk.
    Issued oldest = std::move(issued.front());
    issued.pop_front();
    std::exception_ptr error;
    try {
      oldest.landing();
    } catch (...) {
      error = std::current_exception();
    }
    oldest.ticket.complete(error);
  }
}

void ChunkedCopyQueue::issue(Item& item, std::exception_ptr startError, std::deque<Issued>& issued) {
  Submission& sub = *item.submission;
  std::exception_ptr error = startError;
  Landing landing;
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
    if (!error && item.bytes > 0) landing = issue_(item.dst, item.src, item.bytes);
  } catch (...) {
    error = std::current_exception();
  }
  if (error || !landing) {  // failed, or landed as it was issued
    item.ticket.complete(error);
    return;
  }
  issued.push_back({std::move(landing), std::move(item.ticket)});
}

}  // namespace rp::device
