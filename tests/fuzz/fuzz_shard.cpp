// A checkpoint's HDF5 shard as a resume reads it (checkpoint::readSlices): the file is checked against the
// manifest's size and CRC-32 before HDF5 opens it, then its dataset is read, type-checked and checksummed. The
// manifest is the seed shard's; whatever the file holds, the reader leaves no HDF5 object open.
#include <hdf5.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>

#include "checkpoint/manifest.h"
#include "checkpoint/shard.h"
#include "fuzz_target.h"

namespace rp::fuzz {

namespace {

const std::vector<float> kValues{1, 2, 3, 4};

// The seed shard written once into `dir`, and the manifest that lists it.
checkpoint::Manifest seedShard(const std::string& dir) {
  std::vector<float> values = kValues;
  std::filesystem::create_directories(dir);
  const std::string path = dir + "/shard-00000.h5";
  std::filesystem::remove(path);
  checkpoint::Manifest m;
  m.slices =
      checkpoint::writeShard(path, {{checkpoint::Kind::kMaster, "model.layers.0.w", {2, 2}, 0, 4, values.data()}});
  m.files.push_back(checkpoint::fileRecord(path));
  return m;
}

struct NoneLeftOpen {
  ~NoneLeftOpen() {
    // Files, groups, datasets, attributes (the library's predefined datatypes are ids too, always open).
    const unsigned kinds = H5F_OBJ_FILE | H5F_OBJ_GROUP | H5F_OBJ_DATASET | H5F_OBJ_ATTR;
    if (const auto open = H5Fget_obj_count(H5F_OBJ_ALL, kinds); open != 0) {
      std::fprintf(stderr, "the shard reader left %lld HDF5 objects open\n", static_cast<long long>(open));
      std::abort();
    }
    // HDF5 keeps freed blocks on free lists for reuse; libFuzzer's per-input leak check would count them.
    H5garbage_collect();
  }
};

}  // namespace

void fuzzOne(std::string_view data) {
  static const checkpoint::Manifest manifest = seedShard(scratchDir() + "/seed");
  const std::string dir = scratchDir() + "/checkpoint";
  std::filesystem::create_directories(dir);
  writeScratch("checkpoint/shard-00000.h5", data);
  std::vector<float> out(4);
  NoneLeftOpen check;
  checkpoint::readSlices(dir, manifest, {{checkpoint::Kind::kMaster, "model.layers.0.w", {2, 2}, 0, 4, out.data()}});
}

void writeSeeds(const std::string& dir) {
  seedShard(scratchDir() + "/seed");
  writeSeed(dir, "shard.h5", readFile(scratchDir() + "/seed/shard-00000.h5"));
}

}  // namespace rp::fuzz
