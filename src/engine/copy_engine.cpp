#include "engine/copy_engine.h"

#include <cstring>

namespace rp::engine {

struct CopyEngine::Ticket::State {
  std::mutex mutex;
  std::condition_variable cv;
  std::size_t pending = 0;
  std::exception_ptr error;
};

bool CopyEngine::Ticket::done() const {
  std::lock_guard<std::mutex> lock(state_->mutex);
  return state_->pending == 0;
}

void CopyEngine::Ticket::wait() const {
  std::unique_lock<std::mutex> lock(state_->mutex);
  state_->cv.wait(lock, [&] { return state_->pending == 0; });
  if (state_->error) std::rethrow_exception(state_->error);
}

CopyEngine::CopyEngine(std::size_t chunkBytes) : chunkBytes_(std::max<std::size_t>(chunkBytes, 1)) {
  thread_ = std::thread([this] { loop(); });
}

CopyEngine::~CopyEngine() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stop_ = true;
  }
  cv_.notify_all();
  thread_.join();
}

CopyEngine::Ticket CopyEngine::newTicket() {
  Ticket t;
  t.state_ = std::make_shared<Ticket::State>();
  return t;
}

void CopyEngine::enqueue(bool urgent, Item item) {
  {
    std::lock_guard<std::mutex> lock(item.ticket->mutex);
    ++item.ticket->pending;
  }
  {
    std::lock_guard<std::mutex> lock(mutex_);
    (urgent ? urgent_ : weights_).push_back(std::move(item));
  }
  cv_.notify_all();
}

CopyEngine::Ticket CopyEngine::copyUrgent(void* dst, const void* src, std::size_t bytes) {
  Ticket t = newTicket();
  enqueue(true, {dst, src, bytes, t.state_});
  return t;
}

void CopyEngine::copyWeights(Ticket& ticket, void* dst, const void* src, std::size_t bytes) {
  auto* d = static_cast<std::uint8_t*>(dst);
  const auto* s = static_cast<const std::uint8_t*>(src);
  for (std::size_t off = 0; off < bytes || (bytes == 0 && off == 0); off += chunkBytes_) {
    enqueue(false, {d + off, s + off, std::min(chunkBytes_, bytes - off), ticket.state_});
    if (bytes == 0) break;
  }
}

void CopyEngine::loop() {
  while (true) {
    Item item;
    bool urgent = false;
    {
      std::unique_lock<std::mutex> lock(mutex_);
      cv_.wait(lock, [&] { return stop_ || !urgent_.empty() || !weights_.empty(); });
      if (urgent_.empty() && weights_.empty()) return;  // stop requested and drained
      urgent = !urgent_.empty();
      auto& queue = urgent ? urgent_ : weights_;
      item = std::move(queue.front());
      queue.pop_front();
    }
    std::exception_ptr error;
    try {
      if (observer_) observer_(urgent, item.bytes);
      if (item.bytes > 0) std::memcpy(item.dst, item.src, item.bytes);
    } catch (...) {
      error = std::current_exception();
    }
    {
      std::lock_guard<std::mutex> lock(item.ticket->mutex);
      if (error && !item.ticket->error) item.ticket->error = error;
      --item.ticket->pending;
    }
    item.ticket->cv.notify_all();
  }
}

}  // namespace rp::engine
