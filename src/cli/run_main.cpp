#include "cli/run_main.h"

#include <exception>
#include <memory>

#include "common/error.h"
#include "common/log.h"
#include "world/mpi_session.h"

namespace rp::cli {
namespace {

template <typename Fn>
int guarded(Fn&& fn, int& code) {
  try {
    code = fn();
    return 0;
  } catch (const InputError& e) {
    RP_LOG_ERROR("{}", e.what());
    code = kExitBadInput;
  } catch (const std::exception& e) {
    RP_LOG_ERROR("{}", e.what());
    code = kExitFailure;
  }
  return 1;
}

}  // namespace

int runMain(const std::function<int()>& body) {
  int code = kExitOk;
  guarded(body, code);
  return code;
}

int runMpiMain(int* argc, char*** argv, const std::function<int(const MpiSession&)>& body) {
  std::unique_ptr<MpiSession> session;
  int code = kExitOk;
  if (guarded(
          [&] {
            session = std::make_unique<MpiSession>(argc, argv);
            return kExitOk;
          },
          code) != 0)
    return code;
  if (guarded([&] { return body(*session); }, code) != 0 && session->identity().size > 1) {
    RP_LOG_ERROR("rank {} failed; aborting all {} ranks", session->identity().rank, session->identity().size);
    MPI_Abort(MPI_COMM_WORLD, code);
  }
  return code;
}

}  // namespace rp::cli
