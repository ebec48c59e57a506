#include "cli/run_main.h"

#include <cstdio>
#include <cstdlib>
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

void exitProcess(int code) {
  std::fflush(nullptr);
  std::_Exit(code);
}

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
    // Exit now, without MPI_Finalize (the others may be waiting on this rank): the launcher ends the job on
    // a rank's non-zero exit (mpirun by default, srun --kill-on-bad-exit=1) and reports this rank and code.
    // MPI_Abort would do the same with a help message that Open MPI 4.1 garbles ("ORTE_ERROR_LOG: Data
    // unpack would read past end of buffer") after ours.
    RP_LOG_ERROR("rank {} failed; ending the job of {} ranks (exit code {})", session->identity().rank,
                 session->identity().size, code);
    std::fflush(nullptr);
    std::_Exit(code);
  }
  return code;
}

}  // namespace rp::cli
