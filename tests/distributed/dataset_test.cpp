// The sharded loader across real ranks: runs alone and under mpirun -np 2 / -np 3. Every rank builds
// the same loaders and issues the same collectives in the same order.
#include "loom/data/loader.h"

#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <set>

#include "../io/dataset_test_helpers.h"
#include "../test_utils.h"
#include "loom/distributed/distributed.h"

using namespace loom;
using loom::testing::expect_array;
namespace dist = loom::distributed;

namespace {

void barrier() { dist::all_sum(array(1.0f)).eval(); }

// A directory every rank agrees on (named after rank 0's pid), created by rank 0; removed by the
// destructor after a barrier.
class SharedDir {
 public:
  explicit SharedDir(const std::string& tag) {
    auto g = dist::init();
    const int pid = dist::all_max(array(g.rank() == 0 ? static_cast<int>(::getpid()) : 0)).item<int>();
    std::filesystem::path base = std::filesystem::temp_directory_path();
    if (::access("/dev/shm", W_OK) == 0) base = "/dev/shm";
    path_ = base / ("loom_dist_" + tag + "_" + std::to_string(pid));
    if (g.rank() == 0) {
      std::filesystem::remove_all(path_);
      std::filesystem::create_directories(path_);
    }
    barrier();
  }
  ~SharedDir() {
    barrier();
    if (dist::init().rank() == 0) {
      std::error_code ec;
      std::filesystem::remove_all(path_, ec);
    }
  }
  std::string operator/(const std::string& name) const { return (path_ / name).string(); }
  const std::filesystem::path& path() const { return path_; }

 private:
  std::filesystem::path path_;
};

void write_file(const std::string& path, const std::string& bytes) {
  std::ofstream f(path, std::ios::binary);
  f.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  ASSERT_TRUE(f.good()) << path;
}

data::LoaderOptions opts(bool shuffle, data::Remainder rem, uint64_t seed) {
  data::LoaderOptions o;
  o.shuffle = shuffle;
  o.remainder = rem;
  o.seed = seed;
  return o;
}

// The same value on every rank?
bool agreed(int64_t v) {
  array a(v);
  return dist::all_max(a).item<int64_t>() == v && dist::all_min(a).item<int64_t>() == v;
}

}  // namespace

TEST(DistributedData, ShardsAreDisjointAndTileEachGlobalBatch) {
  auto g = dist::init();
  const int S = g.size();
  const int64_t N = 53, B = 4 * S;
  array x = arange(0, static_cast<int>(N));
  data::ArrayDataset ds(astype(x, int32), astype(x * 10, int32));
  for (auto rem : {data::Remainder::drop, data::Remainder::pad}) {
    for (bool shuffle : {true, false}) {
      data::DataLoader loader(ds, B, opts(shuffle, rem, 11));                  // this rank's shard of the world
      data::DataLoader whole(ds, B, opts(shuffle, rem, 11), data::Shard(0, 1));  // what one process would read
      EXPECT_EQ(loader.shard().rank, g.rank());
      EXPECT_EQ(loader.shard().size, S);
      ASSERT_TRUE(agreed(loader.num_batches()));
      ASSERT_EQ(loader.num_batches(), whole.num_batches());
      ASSERT_EQ(loader.num_batches(), rem == data::Remainder::drop ? N / B : (N + B - 1) / B);
      for (int64_t epoch : {0, 3}) {
        loader.set_epoch(epoch);
        whole.set_epoch(epoch);
        std::multiset<int64_t> epoch_samples;
        int64_t b = 0;
        for (auto& [xb, yb] : loader) {
          ASSERT_EQ(xb.shape(), (Shape{static_cast<int>(B / S)}));
          // Gather every rank's rows: in rank order they are exactly the single-process batch.
          array all_x = dist::all_gather(xb), all_y = dist::all_gather(yb);
          std::vector<int64_t> want = whole.global_indices(b);
          std::vector<double> wx(want.begin(), want.end()), wy;
          for (int64_t i : want) wy.push_back(10.0 * i);
          expect_array(all_x, {static_cast<int>(B)}, wx);
          expect_array(all_y, {static_cast<int>(B)}, wy);
          for (int v : all_x.to_vector<int>()) epoch_samples.insert(v);
          ++b;
        }
        EXPECT_EQ(b, loader.num_batches());
        const std::set<int64_t> distinct(epoch_samples.begin(), epoch_samples.end());
        if (rem == data::Remainder::drop) {
          // No sample is read twice in an epoch, by this rank or any other.
          EXPECT_EQ(distinct.size(), epoch_samples.size());
          EXPECT_EQ(epoch_samples.size(), static_cast<size_t>(N / B * B));
        } else {
          EXPECT_EQ(distinct.size(), static_cast<size_t>(N));  // every sample, a few twice
        }
      }
    }
  }
}

TEST(DistributedData, UnevenBatchSizeIsRefusedOnEveryRank) {
  auto g = dist::init();
  array x = arange(0, 10);
  data::ArrayDataset ds(x, x);
  if (g.size() == 1) {
    EXPECT_NO_THROW(data::DataLoader(ds, 5));
  } else {
    EXPECT_THROW_MSG(data::DataLoader(ds, 2 * g.size() + 1), std::invalid_argument,
                     "the global batch size " + std::to_string(2 * g.size() + 1) +
                         " is not divisible by the number of ranks " + std::to_string(g.size()));
  }
}

TEST(DistributedData, RanksRacingOnOneGzipShareOneCacheFile) {
  // Every rank opens the same .gz at once with an empty cache: each gets whole data, and exactly one
  // cache file (no temporaries) is left.
  auto g = dist::init();
  SharedDir dir("gz");
  std::string img;
  for (int i = 0; i < 40; ++i) img += std::string{static_cast<char>(i), static_cast<char>(200 + i % 50)};
  if (g.rank() == 0) {
    write_file(dir / "x.gz", datatest::gzip_stored(datatest::idx_header(0x08, {40, 2}) + img));
    std::string labels;
    for (int i = 0; i < 40; ++i) labels += static_cast<char>(i % 10);
    write_file(dir / "y", datatest::idx_header(0x08, {40}) + labels);
  }
  barrier();
  data::IdxDataset ds(io::IdxFile::open(dir / "x.gz", dir / "cache"), io::IdxFile::open(dir / "y", dir / "cache"),
                    std::nullopt, int32);
  EXPECT_EQ(ds.size(), 40);
  barrier();
  if (g.rank() == 0) {
    int idx = 0;
    for (const auto& e : std::filesystem::directory_iterator(dir / "cache")) {
      const std::string ext = e.path().extension().string();
      EXPECT_TRUE(ext == ".idx" || ext == ".lock") << e.path();
      idx += ext == ".idx";
    }
    EXPECT_EQ(idx, 1);
  }
  // Sharded reading of the file: the gathered rows equal the single-process batch.
  const int S = g.size();
  data::DataLoader loader(ds, 2 * S, opts(true, data::Remainder::pad, 5));
  data::DataLoader whole(ds, 2 * S, opts(true, data::Remainder::pad, 5), data::Shard(0, 1));
  ASSERT_TRUE(agreed(loader.num_batches()));
  for (int64_t b = 0; b < loader.num_batches(); ++b) {
    auto [x, y] = loader.batch(b);
    ASSERT_EQ(x.shape(), (Shape{2, 2}));
    EXPECT_EQ(y.dtype(), int32);
    array all_x = dist::all_gather(x), all_y = dist::all_gather(y);
    std::vector<double> wx, wy;
    for (int64_t i : whole.global_indices(b)) {
      wx.insert(wx.end(), {double(i), double(200 + i % 50)});
      wy.push_back(double(i % 10));
    }
    expect_array(all_x, {2 * S, 2}, wx);
    expect_array(all_y, {2 * S}, wy);
  }
}

TEST(DistributedData, FashionMnistShards) {
  const char* kFashion = "/usr/share/datasets/fashion-mnist";
  if (!std::filesystem::exists(kFashion)) GTEST_SKIP() << kFashion << " is not installed";
  auto g = dist::init();
  SharedDir dir("fashion");
  auto test = data::fashion_mnist(kFashion, "test", dir / "cache");  // all ranks decompress-or-wait at once
  const int S = g.size();
  data::DataLoader loader(test, 6 * S, opts(true, data::Remainder::drop, 0));
  ASSERT_TRUE(agreed(loader.num_batches()));
  EXPECT_EQ(loader.num_batches(), 10000 / (6 * S));
  data::DataLoader whole(test, 6 * S, opts(true, data::Remainder::drop, 0), data::Shard(0, 1));
  for (int64_t b : {int64_t(0), loader.num_batches() - 1}) {
    auto [x, y] = loader.batch(b);
    array all_x = dist::all_gather(x), all_y = dist::all_gather(y);
    auto [wx, wy] = whole.batch(b);
    EXPECT_EQ(all_x.to_vector<int>(), wx.to_vector<int>());
    EXPECT_EQ(all_y.to_vector<int>(), wy.to_vector<int>());
  }
}
