// The run configuration (config/run_config.h): a TOML file and `--set key=value` overrides. Input: the TOML
// text, then one override per further part.
#include "config/run_config.h"
#include "fuzz_target.h"

namespace rp::fuzz {

void fuzzOne(std::string_view data) {
  const auto parts = split(data);
  std::vector<std::string> overrides(parts.begin() + 1, parts.end());
  (void)config::loadRunConfig(writeScratch("run.toml", parts[0]), overrides);
}

void writeSeeds(const std::string& dir) {
  writeSeed(dir, "minimal", "[model]\npath = \"m\"\n[data]\npath = \"d.txt\"\n");
  writeSeed(dir, "full",
            join({R"([model]
path = "m"
dtype = "bfloat16"
[data]
path = ["a.jsonl", "b.jsonl"]
format = "sharegpt"
eval_fraction = 0.05
[train]
seq_len = 256
global_batch = 8
microbatches = 4
max_steps = 100
[optim]
lr = 3e-4
mode = "sync"
[lora]
rank = 8
targets = ["q_proj", "v_proj"]
[pipeline]
plan = "2,2 | 1 | 2,2"
recompute = "layer"
[checkpoint]
every = 10
[output]
dir = "out"
)",
                  "train.max_steps=5", "optim.lr=1e-3", "pipeline.profile=p.json"}));
}

}  // namespace rp::fuzz
