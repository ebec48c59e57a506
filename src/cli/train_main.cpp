// roundpipe_train --config run.toml [--set key=value ...]: fine-tune a Hugging Face checkpoint.
// docs/config.md lists the keys.
#include <cstdio>

#include <CLI/CLI.hpp>
#include <torch/torch.h>

#include "cli/run_main.h"
#include "common/log.h"
#include "config/run_config.h"
#include "device/device.h"
#include "train/trainer.h"

namespace {

int run(int argc, char** argv) {
  CLI::App app{"roundpipe_train: fine-tune a Hugging Face Llama/Qwen3 checkpoint"};
  std::string configPath;
  std::vector<std::string> overrides;
  bool printOnly = false;
  app.add_option("--config", configPath, "run config (TOML)")->required();
  app.add_option("--set", overrides, "override a key: --set train.max_steps=50 (repeatable)");
  app.add_flag("--print-config", printOnly, "print the effective config and exit");
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  }
  auto config = rp::config::loadRunConfig(configPath, overrides);
  RP_LOG_INFO("effective config ({}):", configPath);
  for (const auto& line : config.values.describe()) RP_LOG_INFO("  {}", line);
  if (printOnly) return rp::cli::kExitOk;
  const auto devices = rp::device::probe();
  RP_LOG_INFO("backend {}: {}", rp::device::backendName(devices.backend), devices.reason);
  rp::train::Trainer trainer(std::move(config));
  trainer.run();
  return rp::cli::kExitOk;
}

}  // namespace

int main(int argc, char** argv) {
  return rp::cli::runMain([&] { return run(argc, argv); });
}
