#include "common/fault.h"

#include <algorithm>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <string>
#include <thread>
#include <vector>

#include "common/env.h"
#include "common/error.h"
#include "common/log.h"

namespace rp::fault {

bool maybeInject(int rank, std::int64_t step, const char* point) {
  const std::string spec = env::get(env::kFaultInject);
  if (spec.empty()) return false;
  std::vector<std::string> parts;
  for (std::size_t at = 0;;) {
    const auto colon = spec.find(':', at);
    parts.push_back(spec.substr(at, colon == std::string::npos ? std::string::npos : colon - at));
    if (colon == std::string::npos) break;
    at = colon + 1;
  }
  const bool known = !parts.empty() && (parts[0] == "kill" || parts[0] == "throw" || parts[0] == "hang" ||
                                        parts[0] == "nan" || parts[0] == "oom");
  if (!known || parts.size() < 3 || parts.size() > 4) {
    RP_THROW(InputError, "{}='{}': expected kill|throw|hang|nan|oom:<rank>|*:<step>[:<point>]", env::kFaultInject.name,
             spec);
  }
  const std::string where = parts.size() == 4 ? parts[3] : "step";
  if ((parts[1] != "*" && std::stoi(parts[1]) != rank) || std::stoll(parts[2]) != step || where != point) return false;
  if (parts[0] == "nan") {
    RP_LOG_WARN("fault injection: rank {} makes its {} of step {} non-finite", rank, point, step);
    return true;
  }
  if (parts[0] == "oom") {
    RP_LOG_WARN("fault injection: rank {} runs out of memory at {} of step {}", rank, point, step);
    return true;
  }
  if (parts[0] == "kill") {
    RP_LOG_WARN("fault injection: rank {} kills itself at {} of step {}", rank, point, step);
    std::raise(SIGKILL);
  }
  if (parts[0] == "hang") {
    RP_LOG_WARN("fault injection: rank {} hangs at {} of step {}", rank, point, step);
    while (true) std::this_thread::sleep_for(std::chrono::hours(1));
  }
  RP_THROW(Error, "fault injection: rank {} fails at step {}{}", rank, step,
           where == "step" ? std::string() : " (" + where + ")");
}

double slowWorkerSpeed(int rank) {
  const std::string spec = env::get(env::kSlowWorker);
  double speed = 1.0;
  for (std::size_t at = 0; !spec.empty() && at <= spec.size();) {
    const auto comma = std::min(spec.find(',', at), spec.size());
    const std::string item = spec.substr(at, comma - at);
    at = comma + 1;
    int who = -1, used = 0;
    double s = 0;
    if (std::sscanf(item.c_str(), "%d:%lf%n", &who, &s, &used) != 2 || used != static_cast<int>(item.size()) ||
        who < 0 || !(s > 0 && s <= 1)) {
      RP_THROW(InputError, "{}='{}': '{}' is not <rank>:<speed> with a rank >= 0 and a speed in (0, 1]",
               env::kSlowWorker.name, spec, item);
    }
    if (who == rank) speed = s;
  }
  return speed;
}

}  // namespace rp::fault
