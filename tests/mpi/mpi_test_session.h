// The MPI session the MPI gtest main (mpi_gtest_main.cpp) created for this process.
#pragma once

#include "world/mpi_session.h"

namespace rp::test {

const MpiSession& mpiSession();

}  // namespace rp::test
