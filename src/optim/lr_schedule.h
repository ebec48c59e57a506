// Learning-rate schedules with linear warmup, as transformers' get_{constant,linear,cosine}_schedule_with_warmup
// define them: lr(step) = base_lr * factor(step), step counted from 0 for the first optimizer step.
#pragma once

#include <cstdint>
#include <string>

namespace rp::optim {

enum class ScheduleKind { kConstant, kLinear, kCosine };

struct LrSchedule {
  ScheduleKind kind = ScheduleKind::kConstant;
  double baseLr = 1e-3;
  std::int64_t warmupSteps = 0;
  std::int64_t totalSteps = 1;
  double minLrRatio = 0.0;  // cosine/linear floor as a fraction of baseLr

  double at(std::int64_t step) const;
};

// "constant" | "linear" | "cosine"; throws InputError naming `field` otherwise.
ScheduleKind parseScheduleKind(const std::string& name, const std::string& field);

}  // namespace rp::optim
