// Checkpoint write and read throughput against a raw sequential write/read of the same bytes on the same
// disk (fwrite + fsync, fread), the limit a checkpoint format can reach. Prints one table.
// Usage: bench_checkpoint [directory] [MiB] (default: the system temp dir, 1024 MiB). As root, the page
// cache is dropped before each read so reads come from the disk.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <random>
#include <unistd.h>

#include "checkpoint/manifest.h"
#include "checkpoint/shard.h"
#include "checkpoint/directory.h"

namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;

namespace {

double seconds(Clock::time_point since) {
  return std::chrono::duration<double>(Clock::now() - since).count();
}

bool dropCaches() {
  ::sync();
  std::ofstream drop("/proc/sys/vm/drop_caches");
  drop << "3\n";
  return static_cast<bool>(drop.flush());
}

}  // namespace

int main(int argc, char** argv) {
  const fs::path dir = fs::path(argc > 1 ? argv[1] : fs::temp_directory_path().string()) / "rp-bench-checkpoint";
  const std::size_t mib = argc > 2 ? std::stoul(argv[2]) : 1024;
  fs::remove_all(dir);
  fs::create_directories(dir);
  // 8 MiB tensors (2 Mi floats), like the slices of a mid-size model's layers.
  const std::size_t perTensor = std::size_t{1} << 21, tensors = mib / 8;
  std::vector<std::vector<float>> data(tensors, std::vector<float>(perTensor));
  std::mt19937 gen(1);
  std::uniform_real_distribution<float> d(-1, 1);
  for (auto& t : data)
    for (auto& x : t) x = d(gen);
  const double bytes = static_cast<double>(tensors * perTensor * sizeof(float));

  // Alternating repetitions (raw, ours, raw, ours, ...), so neither side profits from going first; medians.
  std::vector<double> rawWrites, rawReads, ourWrites, ourReads;
  bool cold = false;
  rp::checkpoint::CheckpointDir checkpoints(dir / "checkpoints");
  std::vector<rp::checkpoint::Slice> slices;
  for (std::size_t i = 0; i < tensors; ++i) {
    slices.push_back({rp::checkpoint::Kind::kMaster, "t" + std::to_string(i), {static_cast<std::int64_t>(perTensor)},
                      0, static_cast<std::int64_t>(perTensor), data[i].data()});
  }
  for (int rep = 0; rep < 3; ++rep) {
    // Raw: one file, fwrite + fsync; fread back.
    auto start = Clock::now();
    {
      FILE* f = std::fopen((dir / "raw.bin").c_str(), "wb");
      for (const auto& t : data) std::fwrite(t.data(), sizeof(float), t.size(), f);
      std::fflush(f);
      ::fsync(fileno(f));
      std::fclose(f);
    }
    rawWrites.push_back(seconds(start));
    cold = dropCaches();
    start = Clock::now();
    {
      std::vector<float> buffer(perTensor);
      FILE* f = std::fopen((dir / "raw.bin").c_str(), "rb");
      for (std::size_t i = 0; i < tensors; ++i) {
        if (std::fread(buffer.data(), sizeof(float), perTensor, f) != perTensor) return 1;
      }
      std::fclose(f);
    }
    rawReads.push_back(seconds(start));
    fs::remove(dir / "raw.bin");

    // Ours: one shard (CRC-32 per dataset, chunked HDF5, fsync, read back for the file's CRC-32) + the manifest
    // and the publish protocol; read back with verification (the file's CRC-32, then each dataset's).
    const std::int64_t step = rep + 1;
    start = Clock::now();
    checkpoints.prepare(step);
    rp::checkpoint::Manifest m;
    m.step = step;
    m.writers = 1;
    m.slices = rp::checkpoint::writeShard(checkpoints.shardPath(step, 0), slices);
    m.files.push_back(rp::checkpoint::fileRecord(checkpoints.shardPath(step, 0)));  // as the saver does
    checkpoints.publish(m, 0);
    ourWrites.push_back(seconds(start));
    dropCaches();
    start = Clock::now();
    const auto ck = checkpoints.resolve("latest");
    rp::checkpoint::readSlices(ck, rp::checkpoint::readManifest(ck), slices);
    ourReads.push_back(seconds(start));
    fs::remove_all(ck);  // retention is not part of the write
  }
  // The checksum alone (part of the write and of the read).
  auto start = Clock::now();
  std::uint32_t crc = 0;
  for (const auto& t : data) crc ^= rp::checkpoint::crc32(t.data(), t.size() * sizeof(float));
  const double crcSeconds = seconds(start);
  fs::remove_all(dir);
  auto median = [](std::vector<double> v) {
    std::sort(v.begin(), v.end());
    return v[v.size() / 2];
  };
  const double rawWrite = median(rawWrites), rawRead = median(rawReads), ourWrite = median(ourWrites),
               ourRead = median(ourReads);

  std::printf("checkpoint I/O, %.0f MiB in %zu tensors, %s (%s reads; medians of 3)\n", bytes / (1 << 20), tensors,
              dir.parent_path().c_str(), cold ? "cold-cache" : "page-cache");
  std::printf("| operation | raw fwrite/fread GB/s | roundpipe GB/s | roundpipe / raw |\n|---|---:|---:|---:|\n");
  std::printf("| write (+fsync) | %.2f | %.2f | %.0f%% |\n", bytes / rawWrite / 1e9, bytes / ourWrite / 1e9,
              100 * rawWrite / ourWrite);
  std::printf("| read (+verify) | %.2f | %.2f | %.0f%% |\n", bytes / rawRead / 1e9, bytes / ourRead / 1e9,
              100 * rawRead / ourRead);
  std::printf("(CRC-32 alone: %.2f GB/s; checksum %08x)\n", bytes / crcSeconds / 1e9, crc);
  return 0;
}
