#include "memory/node_store.h"

#include <unistd.h>

#include <algorithm>
#include <vector>

#include "common/error.h"
#include "memory/shm_segment.h"

namespace rp::memory {

std::size_t StoreLayout::add(const std::string& name, std::size_t bytes) {
  RP_CHECK(!regions_.count(name), "store region '{}' added twice", name);
  const std::size_t offset = (total_ + 63) / 64 * 64;
  regions_[name] = {offset, bytes};
  total_ = offset + bytes;
  return offset;
}

std::size_t StoreLayout::offset(const std::string& name) const {
  const auto it = regions_.find(name);
  RP_CHECK(it != regions_.end(), "store region '{}' does not exist", name);
  return it->second.offset;
}

std::size_t StoreLayout::bytes(const std::string& name) const {
  const auto it = regions_.find(name);
  RP_CHECK(it != regions_.end(), "store region '{}' does not exist", name);
  return it->second.bytes;
}

namespace {

class SharedSegment : public NodeMemory {
 public:
  explicit SharedSegment(ShmSegment segment) : segment_(std::move(segment)) {}
  std::uint8_t* data() const override { return segment_.data(); }
  std::string describe() const override { return "shared memory " + segment_.name(); }

 private:
  ShmSegment segment_;
};

class Buffer : public NodeMemory {
 public:
  explicit Buffer(std::size_t bytes) : bytes_(new std::uint8_t[bytes]()) {}
  std::uint8_t* data() const override { return bytes_.get(); }
  std::string describe() const override { return "in-process buffer"; }

 private:
  std::unique_ptr<std::uint8_t[]> bytes_;
};

}  // namespace

std::shared_ptr<NodeMemory> mapSharedMemory(std::size_t bytes, control::ControlChannel& node, const std::string& tag) {
  const std::size_t size = std::max<std::size_t>(bytes, 64);
  // The creator's pid makes the name unique per job and node.
  std::int64_t pid = static_cast<std::int64_t>(::getpid());
  node.broadcast(&pid, sizeof(pid), 0);
  const std::string name = "/roundpipe-" + std::to_string(pid) + "-" + tag;
  ShmSegment segment;
  if (node.rank() == 0) segment = ShmSegment::create(name, size);
  node.barrier();  // created
  if (node.rank() != 0) segment = ShmSegment::open(name, size);
  node.barrier();  // mapped
  segment.unlink();
  return std::make_shared<SharedSegment>(std::move(segment));
}

std::shared_ptr<NodeMemory> shareInProcess(std::size_t bytes, control::ControlChannel& node, const std::string&) {
  std::shared_ptr<NodeMemory> memory;
  if (node.rank() == 0) memory = std::make_shared<Buffer>(std::max<std::size_t>(bytes, 64));
  // The ranks are threads of this process: they copy rank 0's handle while rank 0 waits at the barrier.
  const std::shared_ptr<NodeMemory>* handle = node.rank() == 0 ? &memory : nullptr;
  node.broadcast(&handle, sizeof(handle), 0);
  if (node.rank() != 0) memory = *handle;
  node.barrier();
  return memory;
}

NodeStore::NodeStore(StoreLayout layout, std::shared_ptr<NodeMemory> memory)
    : layout_(std::move(layout)), memory_(std::move(memory)) {
  RP_CHECK(memory_ != nullptr, "node store without memory");
}

std::uint8_t* NodeStore::bytes(const std::string& name) const {
  return memory_->data() + layout_.offset(name);
}
float* NodeStore::floats(const std::string& name) const {
  return reinterpret_cast<float*>(bytes(name));
}
double* NodeStore::doubles(const std::string& name) const {
  return reinterpret_cast<double*>(bytes(name));
}

}  // namespace rp::memory
