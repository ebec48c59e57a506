#include "run/utilisation.h"

#include "device/device.h"
#include "schedule/projection.h"

namespace rp::run {

double modelFlopsPerStep(const config::RunConfig& c, const model::ModelConfig& model) {
  const schedule::ModelShape shape = schedule::shapeOf(model);
  const auto seq = static_cast<int>(c.train.seqLen), rows = static_cast<int>(c.train.globalBatch);
  double forward = schedule::headFlops(shape, seq, rows);
  for (int l = 0; l < shape.layers; ++l) forward += schedule::decoderLayerFlops(shape, seq, rows, shape.window(l));
  return 3.0 * forward;
}

double peakFlops(const config::RunConfig& c, const std::string& deviceName, int devices) {
  if (c.output.peakTflops > 0) return c.output.peakTflops * 1e12;
  if (deviceName.empty()) return 0.0;
  return device::tensorPeakTflops(deviceName) * 1e12 * devices;
}

}  // namespace rp::run
