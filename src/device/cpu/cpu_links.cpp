#include "device/cpu/cpu_links.h"

#include <unistd.h>

#include <atomic>
#include <cstdint>
#include <cstring>
#include <deque>
#include <map>
#include <mutex>
#include <sstream>
#include <utility>
#include <vector>

#include <fmt/format.h>

#include "common/error.h"

namespace rp::device {
namespace {

struct Sent {
  std::uint64_t tag = 0;
  std::vector<std::uint8_t> bytes;
};

struct Hub {
  std::mutex mutex;
  std::map<std::pair<int, int>, std::deque<Sent>> queues;  // (from, to)
};

// The process's hubs by id, alive while a rank holds one.
std::shared_ptr<Hub> hubOf(const std::string& id) {
  static std::mutex mutex;
  static std::map<std::string, std::weak_ptr<Hub>> hubs;
  std::lock_guard<std::mutex> lock(mutex);
  auto hub = hubs[id].lock();
  if (!hub) {
    hub = std::make_shared<Hub>();
    hubs[id] = hub;
  }
  return hub;
}

class CpuLinks : public PeerLinks {
 public:
  CpuLinks(std::shared_ptr<Hub> hub, int rank, int ranks, int slots, std::size_t slotBytes)
      : hub_(std::move(hub)), rank_(rank), ranks_(ranks), slots_(slots), slotBytes_(slotBytes) {}

  void send(int peer, int slot, const void* src, std::size_t bytes, std::uint64_t tag) override {
    RP_CHECK(peer >= 0 && peer < ranks_ && peer != rank_ && slot >= 0 && slot < slots_ && bytes <= slotBytes_,
             "rank {}: a send to rank {} from slot {} of {} bytes ({} ranks, {} slots of {} bytes)", rank_, peer, slot,
             bytes, ranks_, slots_, slotBytes_);
    const auto* from = static_cast<const std::uint8_t*>(src);
    Sent sent{tag, std::vector<std::uint8_t>(from, from + bytes)};
    std::lock_guard<std::mutex> lock(hub_->mutex);
    hub_->queues[{rank_, peer}].push_back(std::move(sent));
  }

  Ticket receive(int peer, void* dst, std::size_t bytes, std::uint64_t tag) override {
    Sent sent;
    {
      std::lock_guard<std::mutex> lock(hub_->mutex);
      auto& queue = hub_->queues[{peer, rank_}];
      RP_CHECK(!queue.empty(), "rank {} receives tensor {:#x} from rank {}, which has sent it nothing more", rank_, tag,
               peer);
      RP_CHECK(queue.front().tag == tag,
               "rank {} receives tensor {:#x} from rank {}, whose next send is {:#x}: a pair's sends and receives "
               "are out of order",
               rank_, tag, peer, queue.front().tag);
      sent = std::move(queue.front());
      queue.pop_front();
    }
    RP_CHECK(sent.bytes.size() == bytes, "rank {} receives {} bytes of tensor {:#x} from rank {}, which sent {}", rank_,
             bytes, tag, peer, sent.bytes.size());
    std::memcpy(dst, sent.bytes.data(), bytes);
    return {};
  }

 private:
  std::shared_ptr<Hub> hub_;
  int rank_, ranks_, slots_;
  std::size_t slotBytes_;
};

}  // namespace

std::string cpuLinksId() {
  static std::atomic<int> made{0};
  return fmt::format("cpu-links {} {}", ::getpid(), made++);
}

std::unique_ptr<PeerLinks> joinCpuLinks(const std::string& id, int rank, int ranks, int slots, std::size_t slotBytes) {
  std::istringstream in(id);
  std::string kind;
  long pid = 0;
  in >> kind >> pid;
  RP_CHECK(in && kind == "cpu-links", "malformed CPU peer-links id '{}'", id);
  if (pid != static_cast<long>(::getpid())) {
    RP_THROW(InputError,
             "rank {}: CPU workers' peer links join only ranks of one process (threads as ranks), and these were "
             "made by process {}: pipeline.tensor_channel = \"nccl\" needs CUDA workers; use \"host\"",
             rank, pid);
  }
  return std::make_unique<CpuLinks>(hubOf(id), rank, ranks, slots, slotBytes);
}

}  // namespace rp::device
