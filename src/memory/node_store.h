// The node-shared host store: one block of memory per node that every rank of the node maps, holding named
// regions (weights, gradient slots, the activation arena, losses). The layout is computed identically on
// every rank from the same inputs, so a region is found by name and never sent over the wire. The memory is
// a POSIX shared-memory segment between processes, or a plain buffer shared by threads (threads as ranks).
// Thread-safety: the mapping is shared; who writes which bytes when is the engine's protocol (docs/schedule.md).
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>

#include "control/channel.h"

namespace rp::memory {

class StoreLayout {
 public:
  // Adds a region of `bytes` (64-byte aligned); names are unique.
  std::size_t add(const std::string& name, std::size_t bytes);
  std::size_t offset(const std::string& name) const;
  std::size_t bytes(const std::string& name) const;
  bool has(const std::string& name) const { return regions_.count(name) != 0; }
  std::size_t total() const { return total_; }

 private:
  struct Region {
    std::size_t offset, bytes;
  };
  std::map<std::string, Region> regions_;
  std::size_t total_ = 0;
};

// Zero-filled bytes that every rank of a node sees at the same time.
class NodeMemory {
 public:
  virtual ~NodeMemory() = default;
  virtual std::uint8_t* data() const = 0;
  virtual std::string describe() const = 0;  // for logs: "shared memory /roundpipe-…", "in-process buffer"
};

// Collective over the node's channel (every rank of the node calls it): memory of `bytes` for `tag`.
using NodeMemoryFactory = std::function<std::shared_ptr<NodeMemory>(std::size_t bytes, control::ControlChannel& node,
                                                                    const std::string& tag)>;

// Between processes: local rank 0 creates a POSIX shared-memory segment, every rank maps it, then the name is
// unlinked (Note [Shm lifetime]).
std::shared_ptr<NodeMemory> mapSharedMemory(std::size_t bytes, control::ControlChannel& node, const std::string& tag);
// Between threads of one process (an inproc channel): rank 0 allocates one buffer and every rank holds it.
std::shared_ptr<NodeMemory> shareInProcess(std::size_t bytes, control::ControlChannel& node, const std::string& tag);

class NodeStore {
 public:
  // `memory` holds at least layout.total() bytes.
  NodeStore(StoreLayout layout, std::shared_ptr<NodeMemory> memory);

  float* floats(const std::string& name) const;
  double* doubles(const std::string& name) const;
  std::uint8_t* bytes(const std::string& name) const;
  const StoreLayout& layout() const { return layout_; }
  std::string describe() const { return memory_->describe(); }

 private:
  StoreLayout layout_;
  std::shared_ptr<NodeMemory> memory_;
};

}  // namespace rp::memory
