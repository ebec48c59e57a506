// Utilisation in the numbers (docs/metrics.md, "Utilisation"): the model FLOPs a training step does, from the
// one FLOP model the planner and the projections use, and the peak they are measured against for MFU.
#pragma once

#include <string>

#include "config/run_config.h"
#include "model/config.h"

namespace rp::run {

// Model FLOPs of one optimizer step (train.global_batch rows of train.seq_len tokens): forward through every
// decoder layer (matmuls and causal attention) and the LM head, backward twice that; recomputation is not
// model work and is not counted (MFU, not HFU).
double modelFlopsPerStep(const config::RunConfig& config, const model::ModelConfig& model);

// The job's peak FLOP/s for MFU: output.peak_tflops where set, else `devices` GPUs of `deviceName`'s tensor
// peak (device::tensorPeakTflops); 0 (no MFU) for the CPU or a GPU not in the table.
double peakFlops(const config::RunConfig& config, const std::string& deviceName, int devices);

}  // namespace rp::run
