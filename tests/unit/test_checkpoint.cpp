// Checkpoint files on their own (torch-free): HDF5 shards, the manifest, atomic publish, resharding reads,
// and every way a checkpoint can be damaged (docs/checkpoint-format.md).
#include <sched.h>
#include <sys/mount.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include <filesystem>
#include <fstream>
#include <random>

#include <gtest/gtest.h>
#include <hdf5.h>

#include "checkpoint/directory.h"
#include "checkpoint/manifest.h"
#include "checkpoint/shard.h"
#include "common/error.h"

namespace rp::checkpoint {
namespace {
namespace fs = std::filesystem;

class TempDir {
 public:
  TempDir() {
    std::string pattern = (fs::temp_directory_path() / "rp-ckpt-XXXXXX").string();
    if (::mkdtemp(pattern.data()) == nullptr) throw std::runtime_error("mkdtemp failed");
    path_ = pattern;
  }
  ~TempDir() {
    std::error_code ec;
    fs::remove_all(path_, ec);
  }
  const fs::path& path() const { return path_; }

 private:
  fs::path path_;
};

// Two tensors with random values; state saved by `writers` writers, each owning a contiguous range.
struct State {
  std::vector<float> a, b;  // shapes [6, 5] and [7]
  explicit State(unsigned seed) : a(30), b(7) {
    std::mt19937 gen(seed);
    std::normal_distribution<float> d;
    for (auto& x : a) x = d(gen);
    for (auto& x : b) x = d(gen);
  }
  std::vector<Slice> slicesOf(int writer, int writers) {
    std::vector<Slice> out;
    auto add = [&](Kind kind, const char* name, std::vector<std::int64_t> shape, std::vector<float>& v) {
      const auto n = static_cast<std::int64_t>(v.size());
      const std::int64_t begin = n * writer / writers, end = n * (writer + 1) / writers;
      out.push_back({kind, name, shape, begin, end - begin, v.data() + begin});
    };
    add(Kind::kMaster, "model.a.weight", {6, 5}, a);
    add(Kind::kExpAvg, "model.b.bias", {7}, b);
    return out;
  }
};

Manifest save(const CheckpointDir& dir, std::int64_t step, State& state, int writers, int keep = 0) {
  Manifest m;
  m.step = step;
  m.writers = writers;
  m.model = {{"type", "test"}};
  m.training = {{"tokens_seen", 123}};
  m.runConfig = "[train]\nmax_steps = 3\n";
  dir.prepare(step);
  for (int w = 0; w < writers; ++w) {
    auto records = writeShard(dir.shardPath(step, w), state.slicesOf(w, writers));
    m.slices.insert(m.slices.end(), records.begin(), records.end());
    m.files.push_back(fileRecord(dir.shardPath(step, w)));
  }
  dir.publish(m, keep);
  return m;
}

State load(const fs::path& dir, int readers) {
  State s(0);
  std::fill(s.a.begin(), s.a.end(), -1.f);
  std::fill(s.b.begin(), s.b.end(), -1.f);
  const Manifest m = readManifest(dir);
  for (int r = 0; r < readers; ++r) readSlices(dir, m, s.slicesOf(r, readers));
  return s;
}

template <typename Fn>
std::string errorOf(Fn&& fn) {
  try {
    fn();
  } catch (const Error& e) {
    return e.what();
  }
  return "no error";
}

TEST(Checkpoint, RoundTripAcrossWriterLayouts) {
  TempDir tmp;
  CheckpointDir dir(tmp.path());
  State saved(7);
  save(dir, 5, saved, 4);
  EXPECT_TRUE(fs::exists(tmp.path() / "step-00000005" / "manifest.json"));
  EXPECT_FALSE(fs::exists(dir.staging(5)));
  for (int readers : {1, 2, 3, 4, 5}) {
    const State got = load(dir.resolve("latest"), readers);
    EXPECT_EQ(got.a, saved.a) << readers << " readers";
    EXPECT_EQ(got.b, saved.b) << readers << " readers";
  }
  const Manifest m = readManifest(dir.resolve("step-00000005"));
  EXPECT_EQ(m.step, 5);
  EXPECT_EQ(m.training["tokens_seen"], 123);
  EXPECT_EQ(m.runConfig, "[train]\nmax_steps = 3\n");
}

TEST(Checkpoint, SaveLoadSaveGivesIdenticalDatasetsAndAttributes) {
  TempDir tmp;
  CheckpointDir dir(tmp.path());
  State first(3);
  const Manifest m1 = save(dir, 1, first, 2);
  State again = load(dir.resolve("latest"), 3);
  const Manifest m2 = save(dir, 2, again, 2);
  ASSERT_EQ(m1.slices.size(), m2.slices.size());
  for (std::size_t i = 0; i < m1.slices.size(); ++i) EXPECT_EQ(m1.slices[i], m2.slices[i]) << m1.slices[i].tensor;
  std::ifstream latest(tmp.path() / "latest");
  std::string name;
  latest >> name;
  EXPECT_EQ(name, "step-00000002");
}

TEST(Checkpoint, KeepsTheLastKAndIgnoresPartialSaves) {
  TempDir tmp;
  CheckpointDir dir(tmp.path());
  State s(1);
  for (int step = 1; step <= 4; ++step) save(dir, step, s, 1, /*keep=*/2);
  EXPECT_FALSE(fs::exists(tmp.path() / "step-00000002"));
  EXPECT_TRUE(fs::exists(tmp.path() / "step-00000003"));
  // A crash mid-save leaves step-5.tmp with a shard and no manifest: never chosen, rejected if named.
  dir.prepare(5);
  writeShard(dir.shardPath(5, 0), s.slicesOf(0, 1));
  EXPECT_EQ(dir.resolve("latest"), tmp.path() / "step-00000004");
  EXPECT_NE(errorOf([&] { dir.resolve("step-00000005.tmp"); }).find("is a partial save"), std::string::npos);
  EXPECT_EQ(dir.removeStale(), 1);
  EXPECT_FALSE(fs::exists(dir.staging(5)));
  // A crash between the rename and the pointer update: the newer complete checkpoint wins.
  save(dir, 6, s, 1);
  std::ofstream(tmp.path() / "latest") << "step-00000004\n";
  EXPECT_EQ(dir.resolve("latest"), tmp.path() / "step-00000006");
}

TEST(Checkpoint, DamageIsAClearErrorNamingTheFile) {
  TempDir tmp;
  CheckpointDir dir(tmp.path());
  State s(11);
  save(dir, 1, s, 2);
  const fs::path ck = tmp.path() / "step-00000001", shard0 = ck / "shard-00000.h5", shard1 = ck / "shard-00001.h5";
  auto bytesOf = [](const fs::path& p) {
    std::ifstream in(p, std::ios::binary);
    return std::string(std::istreambuf_iterator<char>(in), {});
  };
  const std::string original = bytesOf(shard0);

  // A flipped byte inside tensor data: find the first slice's raw floats in the file.
  {
    const std::string needle(reinterpret_cast<const char*>(s.a.data()), 4 * sizeof(float));
    const auto at = original.find(needle);
    ASSERT_NE(at, std::string::npos);
    std::string damaged = original;
    damaged[at + 5] = static_cast<char>(damaged[at + 5] ^ 0x10);
    std::ofstream(shard0, std::ios::binary | std::ios::trunc) << damaged;
    auto e = errorOf([&] { load(ck, 1); });
    EXPECT_NE(e.find("checkpoint shard " + shard0.string() + ": checksum mismatch"), std::string::npos) << e;
    // A manifest without file checksums (written before they were recorded): each dataset's own catches it.
    const std::string manifest = bytesOf(ck / "manifest.json");
    auto j = nlohmann::json::parse(manifest);
    j.erase("files");
    std::ofstream(ck / "manifest.json", std::ios::trunc) << j.dump();
    e = errorOf([&] { load(ck, 1); });
    EXPECT_NE(e.find(shard0.string() + ": dataset /master/model.a.weight: checksum mismatch"), std::string::npos) << e;
    std::ofstream(ck / "manifest.json", std::ios::trunc) << manifest;
    // HDF5's own metadata damaged (a byte of the superblock): rejected before HDF5 parses the file.
    damaged = original;
    damaged[20] = static_cast<char>(damaged[20] ^ 0x40);
    std::ofstream(shard0, std::ios::binary | std::ios::trunc) << damaged;
    e = errorOf([&] { load(ck, 1); });
    EXPECT_NE(e.find("checkpoint shard " + shard0.string() + ": checksum mismatch"), std::string::npos) << e;
  }
  // Truncated.
  std::ofstream(shard0, std::ios::binary | std::ios::trunc) << original.substr(0, original.size() / 2);
  auto e = errorOf([&] { load(ck, 1); });
  EXPECT_NE(e.find(shard0.string()), std::string::npos) << e;
  EXPECT_NE(e.find("truncated"), std::string::npos) << e;
  std::ofstream(shard0, std::ios::binary | std::ios::trunc) << original;
  EXPECT_EQ(load(ck, 1).a, s.a) << "restored";

  // Missing shard.
  fs::rename(shard1, tmp.path() / "moved.h5");
  e = errorOf([&] { load(ck, 1); });
  EXPECT_NE(e.find("checkpoint shard " + shard1.string() + " is missing"), std::string::npos) << e;
  fs::rename(tmp.path() / "moved.h5", shard1);

  // Another format version, and a manifest cut short.
  const std::string manifest = bytesOf(ck / "manifest.json");
  auto j = nlohmann::json::parse(manifest);
  j["version"] = 99;
  std::ofstream(ck / "manifest.json", std::ios::trunc) << j.dump();
  e = errorOf([&] { readManifest(ck); });
  EXPECT_NE(e.find((ck / "manifest.json").string() + ": checkpoint format version 99, this roundpipe reads version 1"),
            std::string::npos)
      << e;
  std::ofstream(ck / "manifest.json", std::ios::trunc) << manifest.substr(0, manifest.size() / 2);
  e = errorOf([&] { readManifest(ck); });
  EXPECT_NE(e.find("not valid JSON (truncated or corrupt)"), std::string::npos) << e;
  // Slices that leave a hole.
  j = nlohmann::json::parse(manifest);
  j["tensors"][0]["slices"].erase(1);
  std::ofstream(ck / "manifest.json", std::ios::trunc) << j.dump();
  e = errorOf([&] { readManifest(ck); });
  EXPECT_NE(e.find("do not tile it") == std::string::npos ? e.find("cover") : 0, std::string::npos) << e;
}

// Found by fuzzing (tests/fuzz/regressions/shard): HDF5 crashed converting an attribute whose stored type was
// corrupt. The reader now reads only what has exactly the types a shard is written with.
TEST(Checkpoint, AShardOfOtherTypesIsRejectedBeforeItIsRead) {
  TempDir tmp;
  std::vector<float> values{1, 2, 3, 4};
  const auto record = [&](const fs::path& path) {
    return writeShard(path, {{Kind::kMaster, "w", {4}, 0, 4, values.data()}}).at(0);
  };
  std::vector<float> out(4);
  // The offset attribute rewritten as float64.
  const fs::path a = tmp.path() / "attribute.h5";
  const SliceRecord r = record(a);
  {
    const hid_t f = H5Fopen(a.c_str(), H5F_ACC_RDWR, H5P_DEFAULT);
    const hid_t d = H5Dopen2(f, "/master/w", H5P_DEFAULT);
    ASSERT_GE(H5Adelete(d, "offset"), 0);
    const hsize_t one = 1;
    const double zero = 0.0;
    const hid_t space = H5Screate_simple(1, &one, nullptr);
    const hid_t attr = H5Acreate2(d, "offset", H5T_IEEE_F64LE, space, H5P_DEFAULT, H5P_DEFAULT);
    ASSERT_GE(H5Awrite(attr, H5T_NATIVE_DOUBLE, &zero), 0);
    H5Aclose(attr), H5Sclose(space), H5Dclose(d), H5Fclose(f);
  }
  auto e = errorOf([&] { readRecord(a, r, out.data()); });
  EXPECT_NE(e.find(a.string() + ": dataset /master/w: attribute 'offset' is not 64-bit integers"), std::string::npos)
      << e;
  // The data as float64 under the same name and attributes.
  const fs::path d64 = tmp.path() / "data.h5";
  const SliceRecord r64 = record(d64);
  {
    const hid_t f = H5Fopen(d64.c_str(), H5F_ACC_RDWR, H5P_DEFAULT);
    ASSERT_GE(H5Ldelete(f, "/master/w", H5P_DEFAULT), 0);
    const hsize_t four = 4;
    const double data[4] = {1, 2, 3, 4};
    const hid_t space = H5Screate_simple(1, &four, nullptr);
    const hid_t d = H5Dcreate2(f, "/master/w", H5T_IEEE_F64LE, space, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
    ASSERT_GE(H5Dwrite(d, H5T_NATIVE_DOUBLE, H5S_ALL, H5S_ALL, H5P_DEFAULT, data), 0);
    for (const char* name : {"shape", "offset"}) {
      const std::int64_t value = name[0] == 's' ? 4 : 0;
      const hsize_t one = 1;
      const hid_t s1 = H5Screate_simple(1, &one, nullptr);
      const hid_t attr = H5Acreate2(d, name, H5T_STD_I64LE, s1, H5P_DEFAULT, H5P_DEFAULT);
      H5Awrite(attr, H5T_NATIVE_INT64, &value);
      H5Aclose(attr), H5Sclose(s1);
    }
    H5Sclose(space), H5Dclose(d), H5Fclose(f);
  }
  e = errorOf([&] { readRecord(d64, r64, out.data()); });
  EXPECT_NE(e.find(d64.string() + ": dataset /master/w is not float32"), std::string::npos) << e;
}

// A size-limited tmpfs: the save fails with the path and the reason, the previous checkpoint stays loadable.
TEST(Checkpoint, DiskFullIsAClearErrorAndThePreviousCheckpointSurvives) {
  TempDir tmp;
  // In a private mount namespace the tmpfs goes away with this process, whatever happens to it.
  if (::unshare(CLONE_NEWNS) != 0 || ::mount(nullptr, "/", nullptr, MS_REC | MS_PRIVATE, nullptr) != 0 ||
      ::mount("tmpfs", tmp.path().c_str(), "tmpfs", 0, "size=256k") != 0) {
    GTEST_SKIP() << "cannot mount a size-limited tmpfs here (needs root): " << std::strerror(errno);
  }
  struct Unmount {
    const fs::path& p;
    ~Unmount() { ::umount(p.c_str()); }
  } unmount{tmp.path()};
  CheckpointDir dir(tmp.path());
  State small(5);
  save(dir, 1, small, 1);
  std::vector<float> big(1 << 18, 1.5f);  // 1 MiB: does not fit
  std::vector<Slice> slices{{Kind::kMaster,
                             "big",
                             {static_cast<std::int64_t>(big.size())},
                             0,
                             static_cast<std::int64_t>(big.size()),
                             big.data()}};
  dir.prepare(2);
  const auto e = errorOf([&] { writeShard(dir.shardPath(2, 0), slices); });
  EXPECT_NE(e.find(dir.shardPath(2, 0).string()), std::string::npos) << e;
  EXPECT_NE(e.find("No space left on device"), std::string::npos) << e;
  // Every HDF5 object of the failed shard is closed (one left in HDF5's table would crash the library at exit).
  EXPECT_EQ(H5Fget_obj_count(H5F_OBJ_ALL, H5F_OBJ_FILE | H5F_OBJ_GROUP | H5F_OBJ_DATASET | H5F_OBJ_ATTR), 0);
  dir.discard(2);
  EXPECT_FALSE(fs::exists(dir.staging(2)));
  EXPECT_EQ(load(dir.resolve("latest"), 2).a, small.a);
}

}  // namespace
}  // namespace rp::checkpoint
