#include "cli/run_main.h"

#include <charconv>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <memory>

#include <fmt/format.h>

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

std::optional<int> parseCommandLine(CLI::App& app, int argc, char** argv) {
  try {
    app.parse(argc, argv);
    return std::nullopt;
  } catch (const CLI::ParseError& e) {
    return app.exit(e) == 0 ? kExitOk : kExitBadInput;  // CLI11's own codes (106, 109, ...) are not ours
  }
}

CLI::Validator wholeAtLeast(std::int64_t minimum) {
  return CLI::Validator(
      [minimum](std::string& text) -> std::string {
        std::int64_t value = 0;
        const auto [end, error] = std::from_chars(text.data(), text.data() + text.size(), value);
        if (error == std::errc() && end == text.data() + text.size() && value >= minimum) return "";
        return fmt::format("expected a whole number >= {}, got {}", minimum, text);
      },
      fmt::format("INT>={}", minimum));
}

CLI::Validator positiveNumber() {
  return CLI::Validator(
      [](std::string& text) -> std::string {
        char* end = nullptr;
        const double value = std::strtod(text.c_str(), &end);
        if (!text.empty() && *end == '\0' && value > 0) return "";
        return fmt::format("expected a number > 0, got {}", text);
      },
      "NUMBER>0");
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
