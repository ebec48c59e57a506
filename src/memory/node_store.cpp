#include "memory/node_store.h"

#include <unistd.h>

#include <vector>

#include "common/error.h"
#include "world/mpi_session.h"

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

NodeStore::NodeStore(StoreLayout layout, MPI_Comm nodeComm, const std::string& tag) : layout_(std::move(layout)) {
  int localRank = 0;
  checkMpi(MPI_Comm_rank(nodeComm, &localRank), "MPI_Comm_rank(node)");
  const std::size_t size = std::max<std::size_t>(layout_.total(), 64);
  // The creator's pid makes the name unique per job and node.
  long pid = static_cast<long>(::getpid());
  checkMpi(MPI_Bcast(&pid, 1, MPI_LONG, 0, nodeComm), "MPI_Bcast(store pid)");
  const std::string name = "/roundpipe-" + std::to_string(pid) + "-" + tag;
  if (localRank == 0) segment_ = ShmSegment::create(name, size);
  checkMpi(MPI_Barrier(nodeComm), "MPI_Barrier(store created)");
  if (localRank != 0) segment_ = ShmSegment::open(name, size);
  checkMpi(MPI_Barrier(nodeComm), "MPI_Barrier(store mapped)");
  segment_.unlink();
}

std::uint8_t* NodeStore::bytes(const std::string& name) const {
  return segment_.data() + layout_.offset(name);
}
float* NodeStore::floats(const std::string& name) const {
  return reinterpret_cast<float*>(bytes(name));
}
double* NodeStore::doubles(const std::string& name) const {
  return reinterpret_cast<double*>(bytes(name));
}

}  // namespace rp::memory
