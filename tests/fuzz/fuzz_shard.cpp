// A checkpoint's HDF5 shard (checkpoint/shard.h): the reader opens the file and the dataset a manifest
// record names, checks its attributes and checksum.
#include <hdf5.h>

#include <cstdio>
#include <cstdlib>

#include "checkpoint/shard.h"
#include "fuzz_target.h"

namespace rp::fuzz {

namespace {
const std::vector<float> kValues{1, 2, 3, 4};
checkpoint::SliceRecord record() {
  return {checkpoint::Kind::kMaster,
          "model.layers.0.w",
          {2, 2},
          "shard.h5",
          0,
          4,
          checkpoint::crc32(kValues.data(), kValues.size() * sizeof(float))};
}
}  // namespace

// Whatever the file holds, the reader leaves no HDF5 object open (every handle is closed on every path).
void fuzzOne(std::string_view data) {
  std::vector<float> out(4);
  struct NoneLeftOpen {
    ~NoneLeftOpen() {
      // Files, groups, datasets, attributes (the library's predefined datatypes are ids too, always open).
      const unsigned kinds = H5F_OBJ_FILE | H5F_OBJ_GROUP | H5F_OBJ_DATASET | H5F_OBJ_ATTR;
      if (const auto open = H5Fget_obj_count(H5F_OBJ_ALL, kinds); open != 0) {
        std::fprintf(stderr, "readRecord left %lld HDF5 objects open\n", static_cast<long long>(open));
        std::abort();
      }
      // HDF5 keeps freed blocks on free lists for reuse; libFuzzer's per-input leak check would count them.
      H5garbage_collect();
    }
  } check;
  checkpoint::readRecord(writeScratch("shard.h5", data), record(), out.data());
}

void writeSeeds(const std::string& dir) {
  std::vector<float> values = kValues;
  const std::string path = scratchDir() + "/seed.h5";
  checkpoint::writeShard(path, {{checkpoint::Kind::kMaster, "model.layers.0.w", {2, 2}, 0, 4, values.data()}});
  writeSeed(dir, "shard.h5", readFile(path));
}

}  // namespace rp::fuzz
