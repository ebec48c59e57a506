# Sourced by the emulated device's test scripts: a modelled GPU slow enough that its device, not this machine's
# host, sets the pace (docs/emulated.md, "Profiles").
# slow_gpu_profile <file> <tensor TFLOP/s> <link GB/s> [kernel floor us]: writes the profile "Slow GPU".
slow_gpu_profile() {
  cat >"$1" <<TOML
[gpu]
name = "Slow GPU"
count = 2
memory_gb = 4
tensor_tflops = $2
[link]
pcie_gbps = $3
gpus_per_host_bridge = 2
[assumptions]
matmul_efficiency = 1.0
kernel_floor_us = ${4:-0}
TOML
}
