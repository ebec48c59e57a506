// The MPI session the MPI gtest main (mpi_gtest_main.cpp) created for this process.
#pragma once

#include <string>

#include "world/mpi_session.h"

namespace rp::test {

const MpiSession& mpiSession();

// Rank 0's process id, the same on every rank: directories the ranks share carry it, so two runs of the same
// test binary at once (two suites on one machine) never meet in one directory.
long jobTag();

}  // namespace rp::test
