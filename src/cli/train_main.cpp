// roundpipe_train --config run.toml [--set key=value ...] [--resume latest|<dir>]: fine-tune a Hugging Face
// checkpoint.
// One process on the CPU: the single-process trainer. Under `mpirun -np N` (N > 1), or one process with a
// GPU: the RoundPipe pipeline runtime with N workers. docs/config.md lists the keys.
#include <cstdio>
#include <cstdlib>

#include "cli/command_line.h"
#include "cli/run_main.h"
#include "common/env.h"
#include "common/log.h"
#include "common/version.h"
#include "config/run_config.h"
#include "device/device.h"
#include "device/placement.h"
#include "engine/runtime.h"
#include "model/libtorch.h"
#include "world/mpi_transport.h"
#include "run/preemption.h"
#include "train/trainer.h"
#include "world/mpi_session.h"

namespace {

int run(int argc, char** argv, const rp::MpiSession& session) {
  rp::cli::CommandLine line{"roundpipe_train: fine-tune a Hugging Face Llama/Qwen3 checkpoint"};
  std::string configPath;
  std::vector<std::string> overrides;
  std::string resume;
  bool printOnly = false;
  line.option("--config", configPath, "run config (TOML)").required();
  line.option("--set", overrides, "override a key: --set train.max_steps=50 (repeatable)");
  line.option(
      "--resume", resume,
      "continue from a checkpoint: latest, auto (latest if there is one), a name in checkpoint.dir, or a directory");
  line.flag("--print-config", printOnly, "print the effective config (TOML) on stdout and exit");
  if (const auto code = line.parse(argc, argv)) return *code;
  const bool leader = session.identity().rank == 0;
  if (!resume.empty()) overrides.push_back("checkpoint.resume=" + resume);
  auto config = rp::config::loadRunConfig(configPath, overrides);
  if (leader) RP_LOG_INFO("{}", rp::versionLine());  // the log's first line: what wrote it
  if (leader && printOnly) {  // on stdout, as config.effective.toml holds it: `> run.toml` keeps it
    std::printf("# The effective config of roundpipe_train --config %s: --config <this file> runs it again.\n",
                configPath.c_str());
    for (const auto& line : config.effective()) std::printf("%s\n", line.c_str());
    std::fflush(stdout);
    for (const auto& notice : config.notices) RP_LOG_INFO("{}", notice);
  } else if (leader) {
    if (session.identity().size > 1) RP_LOG_INFO("MPI: {}", rp::describeMpiTransport());
    RP_LOG_INFO("effective config ({}):", configPath);
    for (const auto& line : config.effective()) RP_LOG_INFO("  {}", line);
    for (const auto& notice : config.notices) RP_LOG_INFO("{}", notice);
  }
  if (leader) {
    const auto killTimeout = rp::run::killTimeoutWarning(std::getenv("OMPI_MCA_orte_hnp_uri"),
                                                         std::getenv("OMPI_MCA_odls_base_sigkill_timeout"),
                                                         std::getenv(rp::env::kMpirunWrapper.name));
    if (killTimeout) RP_LOG_WARN("{}", *killTimeout);
  }
  if (printOnly) return rp::cli::kExitOk;
  rp::run::installPreemptionHandlers();  // SIGTERM/SIGUSR1: save at the next step boundary, exit 3
  // One process on the cpu backend: the single-process trainer. Otherwise the pipeline runtime, whose ranks
  // each place themselves on a device and log it (one process with a GPU: one worker on it).
  bool useTrainer = false;
  if (session.identity().size == 1) {
    const auto placed = rp::device::place(
        {config.pipeline.backend, 0, 1, static_cast<int>(config.pipeline.ranksPerGpu)}, rp::device::probe());
    useTrainer = placed.backend == rp::device::Backend::kCpu;
    if (useTrainer) RP_LOG_INFO("backend cpu ({}): the single-process trainer", placed.why);
  }
  if (useTrainer) {
    rp::train::Trainer trainer(std::move(config));
    if (!trainer.run()) return rp::cli::kExitPreempted;
  } else {
    const auto channel = config.pipeline.tensorChannel;
    rp::engine::PipelineRuntime runtime(std::move(config), rp::engine::mpiParts(session, channel));
    runtime.run();
    if (runtime.preempted()) return rp::cli::kExitPreempted;
  }
  return rp::cli::kExitOk;
}

}  // namespace

int main(int argc, char** argv) {
  // Before any LibTorch call (Note [LibTorch's CUDA kernels]).
  if (const int code = rp::cli::runMain([] {
        rp::device::loadCudaKernels();
        return rp::cli::kExitOk;
      }))
    rp::cli::exitProcess(code);
  rp::cli::exitProcess(
      rp::cli::runMpiMain(&argc, &argv, [&](const rp::MpiSession& session) { return run(argc, argv, session); }));
}
