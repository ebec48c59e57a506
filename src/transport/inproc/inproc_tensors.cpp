// The in-process tensor backend (threads as ranks): a put tensor is a copy in a map the ranks share, a get
// copies it out (both through the worker's copies: its memory may be a GPU's, and a copy may still be in flight
// when put or get returns, so the bytes are shared with the copy until it is done); readiness goes over the
// control channel. Tensors of iteration t-2 are dropped when iteration t puts its first (the host-staged
// arena's double buffering, without the arena). Every get is checked against its put's readers, so the
// engine's equivalence tests also prove it names them as the device-direct backend needs.
#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <tuple>
#include <vector>

#include <fmt/format.h>

#include "common/error.h"
#include "transport/readiness.h"

namespace rp::transport {

class InProcTensorHub {
 public:
  using Bytes = std::shared_ptr<std::vector<std::uint8_t>>;
  void put(const TensorId& id, int writer, const Readers& readers, Bytes tensor) {
    std::lock_guard<std::mutex> lock(mutex_);
    for (auto it = tensors_.begin(); it != tensors_.end() && std::get<0>(it->first) <= id.step - 2;) {
      it = tensors_.erase(it);
    }
    tensors_[keyOf(id)] = {writer, readers, std::move(tensor)};
  }
  // The tensor's bytes, checked against its put's readers.
  Bytes get(const TensorId& id, int writer, int reader, std::size_t bytes) {
    std::lock_guard<std::mutex> lock(mutex_);
    const auto it = tensors_.find(keyOf(id));
    RP_CHECK(it != tensors_.end(), "tensor (step {}, layer {}, mb {}) was not put before it was read", id.step + 1,
             id.layer, id.microbatch);
    const Entry& e = it->second;
    RP_CHECK(writer == kSaved ? e.readers.saved : e.writer == writer && e.readers.next == reader,
             "tensor (step {}, layer {}, mb {}) read by rank {} as {}, but rank {} put it for next {}{}", id.step + 1,
             id.layer, id.microbatch, reader, writer == kSaved ? "saved" : fmt::format("rank {}'s hand-off", writer),
             e.writer, e.readers.next, e.readers.saved ? " and saved" : "");
    RP_CHECK(e.bytes->size() == bytes, "tensor of {} bytes read into {}", e.bytes->size(), bytes);
    return e.bytes;
  }

 private:
  using Key = std::tuple<std::int64_t, int, int, int>;  // step, layer, microbatch, kind
  static Key keyOf(const TensorId& id) { return {id.step, id.layer, id.microbatch, static_cast<int>(id.kind)}; }
  struct Entry {
    int writer = -1;
    Readers readers;
    Bytes bytes;
  };
  std::mutex mutex_;
  std::map<Key, Entry> tensors_;
};

namespace {

class InProcTensors : public TensorChannel {
 public:
  InProcTensors(std::shared_ptr<InProcTensorHub> hub, const TensorChannelContext& c)
      : hub_(std::move(hub)), worker_(c.worker), readiness_(c.node, c.stall), rank_(c.node.rank()) {}
  ~InProcTensors() override {
    for (const auto& [ticket, bytes] : inFlight_) ticket.wait();
  }
  device::Ticket put(const TensorId& id, const void* src, std::size_t bytes, const Readers& readers) override {
    auto tensor = std::make_shared<std::vector<std::uint8_t>>(bytes);
    device::Ticket copy = worker_.copyUrgent(tensor->data(), src, bytes);
    hold(copy, tensor);
    hub_->put(id, rank_, readers, std::move(tensor));
    return copy;
  }
  device::Ticket get(const TensorId& id, void* dst, std::size_t bytes, int writer) override {
    const InProcTensorHub::Bytes tensor = hub_->get(id, writer, rank_, bytes);
    device::Ticket copy = worker_.copyUrgent(dst, tensor->data(), bytes);
    hold(copy, tensor);
    return copy;
  }
  void signal(int to, const control::StageReady& ready, std::vector<device::Ticket> after) override {
    readiness_.signal(to, ready, std::move(after));
  }
  void await(int from, const control::StageReady& expected, const std::function<std::string()>& describe) override {
    readiness_.await(from, expected, describe);
  }

 private:
  // Keeps `bytes` alive until `copy` is done (the hub may drop a tensor two iterations on), forgetting the
  // copies done since the last call.
  void hold(const device::Ticket& copy, InProcTensorHub::Bytes bytes) {
    while (!inFlight_.empty() && inFlight_.front().first.done()) inFlight_.pop_front();
    if (!copy.done()) inFlight_.emplace_back(copy, std::move(bytes));
  }

  std::shared_ptr<InProcTensorHub> hub_;
  device::Worker& worker_;
  std::deque<std::pair<device::Ticket, InProcTensorHub::Bytes>> inFlight_;
  ControlReadiness readiness_;
  int rank_;
};

}  // namespace

std::shared_ptr<InProcTensorHub> newInProcTensorHub() {
  return std::make_shared<InProcTensorHub>();
}

TensorChannelFactory inProcess(std::shared_ptr<InProcTensorHub> hub) {
  return [hub](const TensorChannelContext& context) -> std::unique_ptr<TensorChannel> {
    return std::make_unique<InProcTensors>(hub, context);
  };
}

}  // namespace rp::transport
