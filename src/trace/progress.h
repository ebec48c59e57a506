// Training progress for humans: a single refreshing line (step/total, loss, tok/s, ETA) when stderr is a
// terminal, plain log lines every `every` steps otherwise.
#pragma once

#include <cstdint>

#include "trace/metrics.h"

namespace rp::trace {

class Progress {
 public:
  Progress(std::int64_t totalSteps, std::int64_t every);
  ~Progress();
  void update(const StepMetrics& m);

 private:
  std::int64_t total_;
  std::int64_t every_;
  bool interactive_;
  double elapsed_ = 0.0;    // over the steps this process ran (a resumed run starts counting at its first)
  std::int64_t timed_ = 0;  // steps in elapsed_
  bool lineOpen_ = false;
};

}  // namespace rp::trace
