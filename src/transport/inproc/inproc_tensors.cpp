// The in-process tensor backend (threads as ranks): a put tensor is a copy in a map the ranks share, a get
// copies it out (both through the worker's copies: its memory may be a GPU's); readiness goes over the
// control channel. Tensors of iteration t-2 are dropped when
// iteration t puts its first (the host-staged arena's double buffering, without the arena).
#include <cstdint>
#include <functional>
#include <map>
#include <mutex>
#include <tuple>
#include <vector>

#include "common/error.h"
#include "transport/readiness.h"

namespace rp::transport {

class InProcTensorHub {
 public:
  void put(const TensorId& id, std::vector<std::uint8_t> tensor) {
    std::lock_guard<std::mutex> lock(mutex_);
    for (auto it = tensors_.begin(); it != tensors_.end() && std::get<0>(it->first) <= id.step - 2;) {
      it = tensors_.erase(it);
    }
    tensors_[keyOf(id)] = std::move(tensor);
  }
  // Calls `read` with the tensor's bytes, under the hub's lock.
  void get(const TensorId& id, std::size_t bytes, const std::function<void(const std::uint8_t*)>& read) {
    std::lock_guard<std::mutex> lock(mutex_);
    const auto it = tensors_.find(keyOf(id));
    RP_CHECK(it != tensors_.end(), "tensor (step {}, layer {}, mb {}) was not put before it was read", id.step + 1,
             id.layer, id.microbatch);
    RP_CHECK(it->second.size() == bytes, "tensor of {} bytes read into {}", it->second.size(), bytes);
    read(it->second.data());
  }

 private:
  using Key = std::tuple<std::int64_t, int, int, int>;  // step, layer, microbatch, kind
  static Key keyOf(const TensorId& id) { return {id.step, id.layer, id.microbatch, static_cast<int>(id.kind)}; }
  std::mutex mutex_;
  std::map<Key, std::vector<std::uint8_t>> tensors_;
};

namespace {

class InProcTensors : public TensorChannel {
 public:
  InProcTensors(std::shared_ptr<InProcTensorHub> hub, const TensorChannelContext& c)
      : hub_(std::move(hub)), worker_(c.worker), readiness_(c.node, c.stall) {}
  void put(const TensorId& id, const void* src, std::size_t bytes) override {
    std::vector<std::uint8_t> tensor(bytes);
    worker_.copyUrgent(tensor.data(), src, bytes).wait();
    hub_->put(id, std::move(tensor));
  }
  void get(const TensorId& id, void* dst, std::size_t bytes) override {
    hub_->get(id, bytes, [&](const std::uint8_t* src) { worker_.copyUrgent(dst, src, bytes).wait(); });
  }
  void signal(int to, const control::StageReady& ready) override { readiness_.signal(to, ready); }
  void await(int from, const control::StageReady& expected, const std::function<std::string()>& describe) override {
    readiness_.await(from, expected, describe);
  }

 private:
  std::shared_ptr<InProcTensorHub> hub_;
  device::Worker& worker_;
  ControlReadiness readiness_;
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
