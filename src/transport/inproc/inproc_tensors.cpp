// The in-process tensor backend (threads as ranks): a put tensor is a copy in a map the ranks share, a get
// copies it out (both through the worker's copies: its memory may be a GPU's); readiness goes over the
// control channel. Tensors of iteration t-2 are dropped when iteration t puts its first (the host-staged
// arena's double buffering, without the arena). Every get is checked against its put's readers, so the
// engine's equivalence tests also prove it names them as the device-direct backend needs.
#include <cstdint>
#include <functional>
#include <map>
#include <mutex>
#include <tuple>
#include <vector>

#include <fmt/format.h>

#include "common/error.h"
#include "transport/readiness.h"

namespace rp::transport {

class InProcTensorHub {
 public:
  void put(const TensorId& id, int writer, const Readers& readers, std::vector<std::uint8_t> tensor) {
    std::lock_guard<std::mutex> lock(mutex_);
    for (auto it = tensors_.begin(); it != tensors_.end() && std::get<0>(it->first) <= id.step - 2;) {
      it = tensors_.erase(it);
    }
    tensors_[keyOf(id)] = {writer, readers, std::move(tensor)};
  }
  // Calls `read` with the tensor's bytes, under the hub's lock.
  void get(const TensorId& id, int writer, int reader, std::size_t bytes,
           const std::function<void(const std::uint8_t*)>& read) {
    std::lock_guard<std::mutex> lock(mutex_);
    const auto it = tensors_.find(keyOf(id));
    RP_CHECK(it != tensors_.end(), "tensor (step {}, layer {}, mb {}) was not put before it was read", id.step + 1,
             id.layer, id.microbatch);
    const Entry& e = it->second;
    RP_CHECK(writer == kSaved ? e.readers.saved : e.writer == writer && e.readers.next == reader,
             "tensor (step {}, layer {}, mb {}) read by rank {} as {}, but rank {} put it for next {}{}", id.step + 1,
             id.layer, id.microbatch, reader, writer == kSaved ? "saved" : fmt::format("rank {}'s hand-off", writer),
             e.writer, e.readers.next, e.readers.saved ? " and saved" : "");
    RP_CHECK(e.bytes.size() == bytes, "tensor of {} bytes read into {}", e.bytes.size(), bytes);
    read(e.bytes.data());
  }

 private:
  using Key = std::tuple<std::int64_t, int, int, int>;  // step, layer, microbatch, kind
  static Key keyOf(const TensorId& id) { return {id.step, id.layer, id.microbatch, static_cast<int>(id.kind)}; }
  struct Entry {
    int writer = -1;
    Readers readers;
    std::vector<std::uint8_t> bytes;
  };
  std::mutex mutex_;
  std::map<Key, Entry> tensors_;
};

namespace {

class InProcTensors : public TensorChannel {
 public:
  InProcTensors(std::shared_ptr<InProcTensorHub> hub, const TensorChannelContext& c)
      : hub_(std::move(hub)), worker_(c.worker), readiness_(c.node, c.stall), rank_(c.node.rank()) {}
  void put(const TensorId& id, const void* src, std::size_t bytes, const Readers& readers) override {
    std::vector<std::uint8_t> tensor(bytes);
    worker_.copyUrgent(tensor.data(), src, bytes).wait();
    hub_->put(id, rank_, readers, std::move(tensor));
  }
  void get(const TensorId& id, void* dst, std::size_t bytes, int writer) override {
    hub_->get(id, writer, rank_, bytes, [&](const std::uint8_t* src) { worker_.copyUrgent(dst, src, bytes).wait(); });
  }
  void signal(int to, const control::StageReady& ready) override { readiness_.signal(to, ready); }
  void await(int from, const control::StageReady& expected, const std::function<std::string()>& describe) override {
    readiness_.await(from, expected, describe);
  }

 private:
  std::shared_ptr<InProcTensorHub> hub_;
  device::Worker& worker_;
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
