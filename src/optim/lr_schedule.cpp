#include "optim/lr_schedule.h"

#include <algorithm>
#include <cmath>
#include <numbers>

#include "common/error.h"

namespace rp::optim {

double LrSchedule::at(std::int64_t step) const {
  if (step < warmupSteps)
    return baseLr * static_cast<double>(step) / static_cast<double>(std::max<std::int64_t>(1, warmupSteps));
  if (kind == ScheduleKind::kConstant) return baseLr;
  const double decaySteps = static_cast<double>(std::max<std::int64_t>(1, totalSteps - warmupSteps));
  // Clamped: past totalSteps the rate stays at its floor (transformers' cosine would rise again).
  const double progress = std::min(1.0, static_cast<double>(step - warmupSteps) / decaySteps);
  double factor = 0.0;
  if (kind == ScheduleKind::kLinear) {
    factor = std::max(0.0, 1.0 - progress);
  } else {
    factor = std::max(0.0, 0.5 * (1.0 + std::cos(std::numbers::pi * progress)));
  }
  return baseLr * (minLrRatio + (1.0 - minLrRatio) * factor);
}

ScheduleKind parseScheduleKind(const std::string& name, const std::string& field) {
  if (name == "constant") return ScheduleKind::kConstant;
  if (name == "linear") return ScheduleKind::kLinear;
  if (name == "cosine") return ScheduleKind::kCosine;
  RP_THROW(InputError, "{} = \"{}\": expected \"constant\", \"linear\" or \"cosine\"", field, name);
}

}  // namespace rp::optim
