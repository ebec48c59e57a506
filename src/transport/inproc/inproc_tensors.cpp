// The in-process tensor backend (threads as ranks): a put tensor is a copy in a map the ranks share, a get
// copies it out; readiness goes over the control channel. Tensors of iteration t-2 are dropped when
// iteration t puts its first (the host-staged arena's double buffering, without the arena).
#include <cstring>
#include <map>
#include <mutex>
#include <tuple>
#include <vector>

#include "common/error.h"
#include "transport/readiness.h"

namespace rp::transport {

class InProcTensorHub {
 public:
  void put(const TensorId& id, const void* src, std::size_t bytes) {
    const auto* p = static_cast<const std::uint8_t*>(src);
    std::lock_guard<std::mutex> lock(mutex_);
    for (auto it = tensors_.begin(); it != tensors_.end() && std::get<0>(it->first) <= id.step - 2;) {
      it = tensors_.erase(it);
    }
    tensors_[keyOf(id)].assign(p, p + bytes);
  }
  void get(const TensorId& id, void* dst, std::size_t bytes) {
    std::lock_guard<std::mutex> lock(mutex_);
    const auto it = tensors_.find(keyOf(id));
    RP_CHECK(it != tensors_.end(), "tensor (step {}, layer {}, mb {}) was not put before it was read", id.step + 1,
             id.layer, id.microbatch);
    RP_CHECK(it->second.size() == bytes, "tensor of {} bytes read into {}", it->second.size(), bytes);
    std::memcpy(dst, it->second.data(), bytes);
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
      : hub_(std::move(hub)), readiness_(c.node, c.stall) {}
  void put(const TensorId& id, const void* src, std::size_t bytes) override { hub_->put(id, src, bytes); }
  void get(const TensorId& id, void* dst, std::size_t bytes) override { hub_->get(id, dst, bytes); }
  void signal(int to, const control::StageReady& ready) override { readiness_.signal(to, ready); }
  void await(int from, const control::StageReady& expected, const std::function<std::string()>& describe) override {
    readiness_.await(from, expected, describe);
  }

 private:
  std::shared_ptr<InProcTensorHub> hub_;
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
