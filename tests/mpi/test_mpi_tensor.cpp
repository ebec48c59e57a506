// Real processes exchanging LibTorch tensors over MPI: the ring every pipeline hand-off builds on.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include "world/mpi_session.h"

namespace rp {
namespace {

int worldRank() {
  int r = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &r);
  return r;
}
int worldSize() {
  int s = 0;
  MPI_Comm_size(MPI_COMM_WORLD, &s);
  return s;
}

// Rank r sends a [shape-prefixed] float tensor derived from r to rank r+1 and checks what rank r-1 sent.
TEST(MpiTensor, RingPassesTensorsBetweenRanks) {
  torch::set_num_threads(1);
  const int rank = worldRank(), size = worldSize();
  ASSERT_GE(size, 2);
  const int next = (rank + 1) % size, prev = (rank + size - 1) % size;
  torch::manual_seed(100 + rank);
  const auto mine = torch::randn({3, 5 + rank});
  const std::int64_t shape[2] = {mine.size(0), mine.size(1)};
  MPI_Request requests[2];
  checkMpi(MPI_Isend(shape, 2, MPI_INT64_T, next, 1, MPI_COMM_WORLD, &requests[0]), "MPI_Isend(shape)");
  checkMpi(MPI_Isend(mine.data_ptr<float>(), static_cast<int>(mine.numel()), MPI_FLOAT, next, 2, MPI_COMM_WORLD,
                     &requests[1]),
           "MPI_Isend(data)");
  std::int64_t theirShape[2] = {0, 0};
  checkMpi(MPI_Recv(theirShape, 2, MPI_INT64_T, prev, 1, MPI_COMM_WORLD, MPI_STATUS_IGNORE), "MPI_Recv(shape)");
  auto theirs = torch::empty({theirShape[0], theirShape[1]});
  checkMpi(MPI_Recv(theirs.data_ptr<float>(), static_cast<int>(theirs.numel()), MPI_FLOAT, prev, 2, MPI_COMM_WORLD,
                    MPI_STATUS_IGNORE),
           "MPI_Recv(data)");
  checkMpi(MPI_Waitall(2, requests, MPI_STATUSES_IGNORE), "MPI_Waitall");

  torch::manual_seed(100 + prev);  // the sender's tensor, regenerated independently here
  const auto expected = torch::randn({3, 5 + prev});
  EXPECT_TRUE(torch::equal(theirs, expected)) << "rank " << rank << " from rank " << prev;
}

TEST(MpiTensor, AllreduceSumsTensorsInPlace) {
  const int rank = worldRank(), size = worldSize();
  auto t = torch::full({4}, static_cast<float>(rank + 1));
  checkMpi(MPI_Allreduce(MPI_IN_PLACE, t.data_ptr<float>(), 4, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD), "MPI_Allreduce");
  EXPECT_TRUE(torch::equal(t, torch::full({4}, static_cast<float>(size * (size + 1) / 2))));
}

TEST(MpiTensor, NodeGroupCoversTheSingleHost) {
  MPI_Comm node = MPI_COMM_NULL;
  MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, worldRank(), MPI_INFO_NULL, &node);
  int localSize = 0;
  MPI_Comm_size(node, &localSize);
  MPI_Comm_free(&node);
  EXPECT_EQ(localSize, worldSize()) << "all ranks of this test run on one host";
}

}  // namespace
}  // namespace rp
