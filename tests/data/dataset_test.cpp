// The datasets (IDX, Fashion-MNIST, arrays, byte-level text), the epoch permutation and the sharded
// DataLoader, on one process (tests/distributed/dataset_test.cpp runs the loader on several ranks).
#include "loom/data/dataset.h"
#include "loom/data/loader.h"

#include <chrono>
#include <cmath>
#include <condition_variable>
#include <mutex>
#include <thread>
#include <cstdlib>
#include <limits>
#include <set>

#include "../io/dataset_test_helpers.h"
#include "../io/io_test_helpers.h"

using namespace loom;
using loom::datatest::be;
using loom::datatest::gzip_stored;
using loom::datatest::idx_header;
using loom::iotest::bytes;
using loom::iotest::read_bytes;
using loom::iotest::write_bytes;
using loom::testing::expect_array;

namespace {

const char* kFashion = "/usr/share/datasets/fashion-mnist";

// [[1, 2, 3], [250, 251, 252]] as a uint8 IDX file.
const std::string kIdx2x3 = idx_header(0x08, {2, 3}) + bytes({1, 2, 3, 250, 251, 252});

class Data : public loom::iotest::TempDirTest {
 protected:
  std::string cache() const { return path("cache"); }
};

TEST_F(Data, IdxDatasetPairsRowsAndConverts) {
  write_bytes(path("x"), kIdx2x3);
  write_bytes(path("y"), idx_header(0x08, {2}) + bytes({4, 200}));
  data::IdxDataset ds(io::IdxFile::open(path("x"), cache()), io::IdxFile::open(path("y"), cache()), float32, int32);
  EXPECT_EQ(ds.size(), 2);
  auto [x, y] = ds.get({1, 1, 0});
  EXPECT_EQ(x.dtype(), float32);
  EXPECT_EQ(y.dtype(), int32);
  EXPECT_TRUE(x.is_evaluated());
  expect_array(x, {3, 3}, {250, 251, 252, 250, 251, 252, 1, 2, 3});
  expect_array(y, {3}, {200, 200, 4});

  write_bytes(path("y3"), idx_header(0x08, {3}) + bytes({1, 2, 3}));
  EXPECT_THROW_MSG(data::IdxDataset(io::IdxFile::open(path("x"), cache()), io::IdxFile::open(path("y3"), cache())),
                   std::invalid_argument, "'" + path("x") + "' has 2 rows but '" + path("y3") + "' has 3");
}

// ---- Fashion-MNIST (when the Debian package dataset-fashion-mnist is installed) ----

TEST_F(Data, FashionMnistTrainAndTest) {
  if (!std::filesystem::exists(kFashion)) GTEST_SKIP() << kFashion << " is not installed";
  auto train = data::fashion_mnist(kFashion, "train", cache());
  EXPECT_EQ(train.size(), 60000);
  EXPECT_EQ(train.x().shape(), (Shape{60000, 28, 28}));
  EXPECT_EQ(train.y().shape(), (Shape{60000}));
  auto [x, y] = train.get({0});
  EXPECT_EQ(x.dtype(), uint8);
  EXPECT_EQ(x.shape(), (Shape{1, 28, 28}));
  EXPECT_EQ(y.dtype(), int32);
  expect_array(y, {1}, {9});  // the first training image is an ankle boot
  // Values checked against Python's gzip module reading the same file.
  EXPECT_EQ(sum(astype(x, int32)).item<int>(), 76247);
  auto px = x.to_vector<int>();
  const std::vector<int> row14 = {0,   0,   1,   4,   6,   7,   2,   0,   0,   0,   0,   0,   237, 226,
                                  217, 223, 222, 219, 222, 221, 216, 223, 229, 215, 218, 255, 77,  0};
  EXPECT_EQ(std::vector<int>(px.begin() + 14 * 28, px.begin() + 15 * 28), row14);
  EXPECT_EQ(sum(astype(train.x().read_rows({59999}), int32)).item<int>(), 16684);
  // Six thousand of each class 0..9: the labels sum to 6000 * 45.
  array labels = train.y().read_all();
  EXPECT_EQ(sum(astype(labels, int32)).item<int>(), 270000);
  EXPECT_EQ(max(labels).item<int>(), 9);

  auto test = data::fashion_mnist(kFashion, "test", cache());
  EXPECT_EQ(test.size(), 10000);
  auto [tx, ty] = test.get({0, 1, 2, 3, 4});
  expect_array(ty, {5}, {9, 2, 1, 1, 6});
  EXPECT_EQ(sum(astype(tx, int32), std::vector<int>{1, 2}).to_vector<int>()[0], 33456);
  EXPECT_EQ(sum(astype(test.y().read_all(), int32)).item<int>(), 45000);
}

TEST_F(Data, FashionMnistErrors) {
  EXPECT_THROW_MSG(data::fashion_mnist(kFashion, "validation", cache()), std::invalid_argument,
                   "split must be \"train\" or \"test\", got \"validation\"");
  EXPECT_THROW_MSG(data::fashion_mnist(path("nowhere"), "train", cache()), std::runtime_error,
                   "neither '" + path("nowhere") + "/train-images-idx3-ubyte' nor");
  // Raw files are found too, and a wrong layout is refused.
  write_bytes(path("t10k-images-idx3-ubyte"), idx_header(0x08, {1, 2, 2}) + bytes({0, 1, 2, 3}));
  write_bytes(path("t10k-labels-idx1-ubyte.gz"), gzip_stored(idx_header(0x08, {1}) + bytes({5})));
  auto ds = data::fashion_mnist(dir.string(), "test", cache());
  auto [x, y] = ds.get({0});
  expect_array(x, {1, 2, 2}, {0, 1, 2, 3});
  expect_array(y, {1}, {5});
  write_bytes(path("t10k-labels-idx1-ubyte"), idx_header(0x0C, {1}) + be(5, 4));
  EXPECT_THROW_MSG(data::fashion_mnist(dir.string(), "test", cache()), std::runtime_error,
                   "holds int32 (1), expected uint8 labels [n]");
}

// ---- text ----

TEST_F(Data, TextWindowsAcrossFiles) {
  write_bytes(path("a.txt"), "abcdefghij");
  write_bytes(path("empty.txt"), "");
  write_bytes(path("b.txt"), "KLMNO");
  data::TextDataset ds({path("a.txt"), path("empty.txt"), path("b.txt")}, 4);
  EXPECT_EQ(ds.num_bytes(), 15);
  EXPECT_EQ(ds.context(), 4);
  EXPECT_EQ(ds.stride(), 4);
  // Windows of 5 bytes start at 0, 4, 8 (8 + 5 <= 15; 12 + 5 > 15).
  EXPECT_EQ(ds.size(), 3);
  auto [x, y] = ds.get({2, 0});
  EXPECT_EQ(x.dtype(), int32);
  // "ijKL" -> "jKLM" (across the file boundary), then "abcd" -> "bcde".
  expect_array(x, {2, 4}, {105, 106, 75, 76, 97, 98, 99, 100});
  expect_array(y, {2, 4}, {106, 75, 76, 77, 98, 99, 100, 101});

  data::TextDataset every({path("a.txt"), path("b.txt")}, 4, 1);
  EXPECT_EQ(every.size(), 11);
  expect_array(every.get({10}).second, {1, 4}, {76, 77, 78, 79});  // "LMNO"
  data::TextDataset apart({path("a.txt"), path("b.txt")}, 4, 5);     // windows of 5 that do not overlap
  EXPECT_EQ(apart.size(), 3);
  expect_array(apart.get({1}).first, {1, 4}, {102, 103, 104, 105});  // "fghi"
  data::TextDataset exact({path("b.txt")}, 4);                         // exactly one window
  EXPECT_EQ(exact.size(), 1);
}

TEST_F(Data, TextErrors) {
  write_bytes(path("a.txt"), "abcdefghij");
  EXPECT_THROW_MSG(data::TextDataset({}, 4), std::invalid_argument, "needs at least one file");
  EXPECT_THROW_MSG(data::TextDataset({path("a.txt")}, 0), std::invalid_argument, "context must be at least 1, got 0");
  EXPECT_THROW_MSG(data::TextDataset({path("a.txt")}, 4, -1), std::invalid_argument, "stride must be >= 0, got -1");
  EXPECT_THROW_MSG(data::TextDataset({path("a.txt")}, 10), std::invalid_argument,
                   "hold 10 bytes, fewer than context + 1 = 11");
  EXPECT_THROW_MSG(data::TextDataset({path("a.txt"), path("nope")}, 4), std::runtime_error,
                   "[TextDataset] '" + path("nope") + "': cannot open");
  data::TextDataset ds({path("a.txt")}, 4);
  EXPECT_THROW_MSG(ds.get({2}), std::out_of_range, "sample 2 is out of range for 2 windows");
}

TEST_F(Data, FortuneFiles) {
  for (const char* n : {"b", "a", "a.dat", "b.dat", ".hidden"}) write_bytes(path(n), "x");
  std::filesystem::create_symlink(path("a"), path("a.u8"));
  std::filesystem::create_directories(path("off"));
  EXPECT_EQ(data::fortune_files(dir.string()), (std::vector<std::string>{path("a"), path("b")}));
  EXPECT_THROW_MSG(data::fortune_files(path("none")), std::runtime_error, "cannot list '" + path("none") + "'");

  const std::string sys = "/usr/share/games/fortunes";
  if (!std::filesystem::exists(sys)) GTEST_SKIP() << sys << " is not installed";
  auto files = data::fortune_files(sys);
  ASSERT_FALSE(files.empty());
  uint64_t total = 0;
  for (const auto& f : files) {
    EXPECT_EQ(f.find(".dat"), std::string::npos);
    EXPECT_EQ(f.find(".u8"), std::string::npos);
    total += std::filesystem::file_size(f);
  }
  EXPECT_NE(std::find(files.begin(), files.end(), sys + "/fortunes"), files.end());
  data::TextDataset text(files, 128);
  EXPECT_EQ(text.num_bytes(), static_cast<int64_t>(total));
  EXPECT_EQ(text.size(), static_cast<int64_t>((total - 129) / 128 + 1));
  // The first window is the first 129 bytes of the first file.
  const std::string head = read_bytes(files[0]).substr(0, 129);
  auto [x, y] = text.get({0});
  auto xv = x.to_vector<int>(), yv = y.to_vector<int>();
  for (int k = 0; k < 128; ++k) {
    ASSERT_EQ(xv[k], static_cast<unsigned char>(head[k])) << k;
    ASSERT_EQ(yv[k], static_cast<unsigned char>(head[k + 1])) << k;
  }
}

// ---- permutation and the loader ----

TEST(Permutation, MatchesAnIndependentImplementation) {
  // From a Python transcription of splitmix64 (checked against the published test vector: seed
  // 1234567 gives 6457827717110365317, 3203168211198807973, ...) and the Fisher-Yates loop.
  EXPECT_EQ(data::permutation(10, 0, 0), (std::vector<int64_t>{1, 7, 6, 2, 0, 9, 8, 4, 5, 3}));
  EXPECT_EQ(data::permutation(10, 0, 1), (std::vector<int64_t>{7, 9, 6, 8, 1, 5, 0, 4, 3, 2}));
  EXPECT_EQ(data::permutation(10, 42, 3), (std::vector<int64_t>{0, 4, 8, 3, 5, 9, 7, 2, 6, 1}));
  EXPECT_EQ(data::permutation(1, 5, 5), (std::vector<int64_t>{0}));
  EXPECT_TRUE(data::permutation(0, 5, 5).empty());
  EXPECT_THROW_MSG(data::permutation(-1, 0, 0), std::invalid_argument, "n must be >= 0, got -1");
}

TEST(Permutation, IsAPermutationAndDependsOnSeedAndEpoch) {
  auto p = data::permutation(1000, 7, 2);
  std::vector<int64_t> sorted = p;
  std::sort(sorted.begin(), sorted.end());
  for (int64_t i = 0; i < 1000; ++i) ASSERT_EQ(sorted[i], i);
  EXPECT_EQ(data::permutation(1000, 7, 2), p);
  EXPECT_NE(data::permutation(1000, 7, 3), p);
  EXPECT_NE(data::permutation(1000, 8, 2), p);
}

// x = 0..n-1 (int32), y = 10 x: a sample's values name its index.
data::ArrayDataset indices_dataset(int n) {
  array x = arange(0, n);
  return data::ArrayDataset(astype(x, int32), astype(x * 10, int32));
}

data::LoaderOptions opts(bool shuffle, data::Remainder rem, uint64_t seed = 0) {
  data::LoaderOptions o;
  o.shuffle = shuffle;
  o.remainder = rem;
  o.seed = seed;
  return o;
}

TEST(DataLoader, InOrderDropAndPad) {
  auto ds = indices_dataset(10);
  data::DataLoader drop(ds, 4, opts(false, data::Remainder::drop), data::Shard(0, 1));
  EXPECT_EQ(drop.num_batches(), 2);
  EXPECT_EQ(drop.global_indices(1), (std::vector<int64_t>{4, 5, 6, 7}));
  data::DataLoader pad(ds, 4, opts(false, data::Remainder::pad), data::Shard(0, 1));
  EXPECT_EQ(pad.num_batches(), 3);
  EXPECT_EQ(pad.global_indices(2), (std::vector<int64_t>{8, 9, 0, 1}));  // wraps to the start
  // Fewer samples than one batch: pad wraps as often as needed, drop yields nothing.
  auto tiny = indices_dataset(3);
  data::DataLoader tpad(tiny, 8, opts(false, data::Remainder::pad), data::Shard(0, 1));
  EXPECT_EQ(tpad.num_batches(), 1);
  EXPECT_EQ(tpad.global_indices(0), (std::vector<int64_t>{0, 1, 2, 0, 1, 2, 0, 1}));
  data::DataLoader tdrop(tiny, 8, opts(false, data::Remainder::drop), data::Shard(0, 1));
  EXPECT_EQ(tdrop.num_batches(), 0);
  EXPECT_EQ(tdrop.begin(), tdrop.end());
}

TEST(DataLoader, ShuffledBatchesFollowThePermutation) {
  auto ds = indices_dataset(10);
  data::DataLoader pad(ds, 4, opts(true, data::Remainder::pad), data::Shard(0, 1));
  // permutation(10, 0, 0) = 1 7 6 2 | 0 9 8 4 | 5 3 (then wraps to 1 7).
  EXPECT_EQ(pad.global_indices(0), (std::vector<int64_t>{1, 7, 6, 2}));
  EXPECT_EQ(pad.global_indices(2), (std::vector<int64_t>{5, 3, 1, 7}));
  pad.set_epoch(1);  // permutation(10, 0, 1) = 7 9 6 8 1 5 0 4 3 2
  EXPECT_EQ(pad.epoch(), 1);
  EXPECT_EQ(pad.global_indices(0), (std::vector<int64_t>{7, 9, 6, 8}));
  // Rank 1 of 2 takes the second half of each global batch.
  data::DataLoader r1(ds, 4, opts(true, data::Remainder::pad), data::Shard(1, 2));
  EXPECT_EQ(r1.local_batch_size(), 2);
  EXPECT_EQ(r1.indices(0), (std::vector<int64_t>{6, 2}));
  EXPECT_EQ(r1.indices(2), (std::vector<int64_t>{1, 7}));
  auto [x, y] = r1.batch(0);
  expect_array(x, {2}, {6, 2});
  expect_array(y, {2}, {60, 20});
  // A different seed gives a different order; the same seed the same one.
  data::DataLoader s7(ds, 10, opts(true, data::Remainder::drop, 7), data::Shard(0, 1));
  data::DataLoader s7b(ds, 10, opts(true, data::Remainder::drop, 7), data::Shard(0, 1));
  EXPECT_EQ(s7.global_indices(0), data::permutation(10, 7, 0));
  EXPECT_EQ(s7.global_indices(0), s7b.global_indices(0));
  EXPECT_NE(s7.global_indices(0), pad.global_indices(0));
}

TEST(DataLoader, ShardsPartitionTheGlobalBatch) {
  // For every group size dividing 12, the ranks' indices concatenated in rank order are exactly the
  // single-process batch, and every rank has the same number of batches.
  auto ds = indices_dataset(50);
  for (auto rem : {data::Remainder::drop, data::Remainder::pad}) {
    for (bool shuffle : {false, true}) {
      data::DataLoader whole(ds, 12, opts(shuffle, rem, 3), data::Shard(0, 1));
      for (int64_t epoch : {0, 1, 5}) {
        whole.set_epoch(epoch);
        std::multiset<int64_t> seen;
        for (int size : {1, 2, 3, 4, 6, 12}) {
          std::vector<data::DataLoader> ranks;
          for (int r = 0; r < size; ++r) ranks.emplace_back(ds, 12, opts(shuffle, rem, 3), data::Shard(r, size));
          for (auto& l : ranks) {
            l.set_epoch(epoch);
            ASSERT_EQ(l.num_batches(), whole.num_batches());
          }
          for (int64_t b = 0; b < whole.num_batches(); ++b) {
            std::vector<int64_t> joined;
            for (auto& l : ranks) {
              auto idx = l.indices(b);
              ASSERT_EQ(idx.size(), size_t(12 / size));
              joined.insert(joined.end(), idx.begin(), idx.end());
              if (size == 1) seen.insert(idx.begin(), idx.end());
            }
            ASSERT_EQ(joined, whole.global_indices(b)) << "size " << size << " batch " << b;
          }
        }
        // Drop: 4 batches of 12 distinct samples; pad: 5 batches, all 50 samples, 10 of them twice.
        if (rem == data::Remainder::drop) {
          EXPECT_EQ(whole.num_batches(), 4);
          EXPECT_EQ(seen.size(), 48u);
          EXPECT_EQ(std::set<int64_t>(seen.begin(), seen.end()).size(), 48u);
        } else {
          EXPECT_EQ(whole.num_batches(), 5);
          EXPECT_EQ(seen.size(), 60u);
          EXPECT_EQ(std::set<int64_t>(seen.begin(), seen.end()).size(), 50u);
        }
      }
    }
  }
}

TEST(DataLoader, RangeForAndResume) {
  auto ds = indices_dataset(10);
  data::DataLoader loader(ds, 4, opts(false, data::Remainder::pad), data::Shard(0, 2));
  std::vector<std::vector<int>> got;
  for (auto& [x, y] : loader) {
    EXPECT_EQ(x.shape(), (Shape{2}));
    expect_array(y, {2}, {10.0 * x.to_vector<int>()[0], 10.0 * x.to_vector<int>()[1]});
    got.push_back(x.to_vector<int>());
  }
  EXPECT_EQ(got, (std::vector<std::vector<int>>{{0, 1}, {4, 5}, {8, 9}}));

  loader.set_start_batch(2);  // resume at the last batch
  got.clear();
  for (auto& [x, y] : loader) got.push_back(x.to_vector<int>());
  EXPECT_EQ(got, (std::vector<std::vector<int>>{{8, 9}}));
  loader.set_start_batch(3);
  EXPECT_EQ(loader.begin(), loader.end());
  loader.set_epoch(1);
  EXPECT_EQ(loader.start_batch(), 0);
  int n = 0;
  for (auto it = loader.begin(); it != loader.end(); ++it) ++n;  // never reads a batch
  EXPECT_EQ(n, 3);
  EXPECT_THROW_MSG(loader.set_start_batch(4), std::out_of_range, "start batch 4 is outside [0, 3]");
  EXPECT_THROW_MSG(loader.set_start_batch(-1), std::out_of_range, "start batch -1");
}

TEST(DataLoader, BadArguments) {
  auto ds = indices_dataset(10);
  EXPECT_THROW_MSG(data::DataLoader(ds, 10, {}, data::Shard(0, 3)), std::invalid_argument,
                   "the global batch size 10 is not divisible by the number of ranks 3");
  EXPECT_THROW_MSG(data::DataLoader(ds, 0, {}, data::Shard(0, 1)), std::invalid_argument,
                   "batch_size must be at least 1, got 0");
  EXPECT_THROW_MSG(data::DataLoader(std::shared_ptr<const data::Dataset>(), 4, {}, data::Shard(0, 1)), std::invalid_argument,
                   "the dataset is null");
  EXPECT_THROW_MSG(data::Shard(2, 2), std::invalid_argument, "rank 2 is outside a group of size 2");
  EXPECT_THROW_MSG(data::Shard(0, 0), std::invalid_argument, "size must be at least 1, got 0");
  data::DataLoader l(ds, 4, {}, data::Shard(0, 1));
  EXPECT_THROW_MSG(l.batch(2), std::out_of_range, "batch 2 is out of range for 2 batches per epoch");
  EXPECT_THROW_MSG(l.global_indices(-1), std::out_of_range, "batch -1 is out of range");
  EXPECT_THROW_MSG(l.set_epoch(-1), std::invalid_argument, "epoch must be >= 0, got -1");
}

TEST(DataLoader, DefaultsAreShuffledDroppedAndTheWorldShard) {
  auto ds = indices_dataset(10);
  data::DataLoader l(ds, 4);
  auto world = distributed::init();
  EXPECT_EQ(l.shard().rank, world.rank());
  EXPECT_EQ(l.shard().size, world.size());
  EXPECT_EQ(l.num_batches(), 2);
  EXPECT_EQ(l.global_indices(0), (std::vector<int64_t>{1, 7, 6, 2}));
  data::DataLoader from_group(ds, 4, {}, world);  // a Group converts to its Shard
  EXPECT_EQ(from_group.shard().size, world.size());
}

TEST(ArrayDataset, RowsOfStridedArraysAndErrors) {
  // x is a transposed (strided) view: rows of x.T.
  array m = reshape(arange(0.0, 6.0, 1.0, float32), {2, 3});
  data::ArrayDataset ds(transpose(m), array({1, 2, 3}));
  EXPECT_EQ(ds.size(), 3);
  auto [x, y] = ds.get({2, 0});
  expect_array(x, {2, 2}, {2, 5, 0, 3});
  expect_array(y, {2}, {3, 1});
  EXPECT_THROW_MSG(ds.get({3}), std::out_of_range, "sample 3 is out of range for 3 samples");
  EXPECT_THROW_MSG(data::ArrayDataset(m, array({1, 2, 3})), std::invalid_argument,
                   "need the same first dimension, got (2,3) and (3)");
  EXPECT_THROW_MSG(data::ArrayDataset(array(1.0f), array({1})), std::invalid_argument, "same first dimension");
}

TEST(Subset, ShiftsIndicesIntoItsRangeAndChecksThem) {
  auto base = std::make_shared<data::ArrayDataset>(indices_dataset(10));
  data::Subset held_out(base, 7, 10);
  EXPECT_EQ(held_out.size(), 3);
  auto [x, y] = held_out.get({2, 0});
  expect_array(y, {2}, {90, 70});
  data::Subset empty(base, 4, 4);
  EXPECT_EQ(empty.size(), 0);
  EXPECT_THROW_MSG(held_out.get({3}), std::out_of_range, "[Subset] index 3 is out of range for 3 samples");
  EXPECT_THROW_MSG(held_out.get({-1}), std::out_of_range, "index -1");
  EXPECT_THROW_MSG(data::Subset(base, 5, 11), std::invalid_argument, "[5, 11) is not within a dataset of 10 samples");
  EXPECT_THROW_MSG(data::Subset(base, 6, 5), std::invalid_argument, "[6, 5)");
  EXPECT_THROW_MSG(data::Subset(nullptr, 0, 0), std::invalid_argument, "needs a dataset");
  // A loader over the train part sees only its samples.
  data::DataLoader loader(data::Subset(base, 0, 7), 7, data::LoaderOptions{false, 0, data::Remainder::drop});
  auto batch = loader.batch(0);
  expect_array(batch.second, {7}, {0, 10, 20, 30, 40, 50, 60});
}

TEST_F(Data, LoaderOverIdxAndText) {
  // uint8 images [6, 2] with row i = (i, 100 + i) and labels i, read through a 2-rank shard.
  std::string img;
  for (int i = 0; i < 6; ++i) img += bytes({i, 100 + i});
  write_bytes(path("x.gz"), gzip_stored(idx_header(0x08, {6, 2}) + img));
  write_bytes(path("y"), idx_header(0x08, {6}) + bytes({0, 1, 2, 3, 4, 5}));
  data::IdxDataset ds(io::IdxFile::open(path("x.gz"), cache()), io::IdxFile::open(path("y"), cache()));
  data::DataLoader l(ds, 4, opts(false, data::Remainder::pad), data::Shard(1, 2));
  std::vector<double> xs, ys;
  for (auto& [x, y] : l) {
    EXPECT_EQ(x.shape(), (Shape{2, 2}));
    for (int v : x.to_vector<int>()) xs.push_back(v);
    for (int v : y.to_vector<int>()) ys.push_back(v);
  }
  // Batches {0,1,2,3} and {4,5,0,1}: rank 1 reads samples 2, 3, then 0, 1.
  EXPECT_EQ(xs, (std::vector<double>{2, 102, 3, 103, 0, 100, 1, 101}));
  EXPECT_EQ(ys, (std::vector<double>{2, 3, 0, 1}));

  write_bytes(path("t.txt"), "0123456789");
  data::DataLoader tl(data::TextDataset({path("t.txt")}, 3), 2, opts(false, data::Remainder::drop), data::Shard(0, 1));
  EXPECT_EQ(tl.num_batches(), 1);  // windows at 0, 3, 6: one full batch of 2
  auto [x, y] = tl.batch(0);
  expect_array(x, {2, 3}, {48, 49, 50, 51, 52, 53});
  expect_array(y, {2, 3}, {49, 50, 51, 52, 53, 54});
}

}  // namespace

// ---- reading ahead (LoaderOptions::prefetch) ----

namespace {

// indices_dataset that records the batches asked for, can fail at one of them, and can hold reads
// until released.
class RecordingDataset : public data::Dataset {
 public:
  explicit RecordingDataset(int n, int64_t fail_at_first = -1) : inner_(indices_dataset(n)), fail_at_(fail_at_first) {}
  int64_t size() const override { return inner_.size(); }
  data::Batch get(const std::vector<int64_t>& indices) const override {
    {
      std::lock_guard<std::mutex> lock(mu_);
      asked_.push_back(indices.front());
    }
    cv_.notify_all();
    if (indices.front() == fail_at_) throw std::runtime_error("cannot read sample " + std::to_string(fail_at_));
    return inner_.get(indices);
  }
  // Waits up to 5 s for `n` reads; the first samples asked for, in order.
  std::vector<int64_t> wait_for(size_t n) const {
    std::unique_lock<std::mutex> lock(mu_);
    cv_.wait_for(lock, std::chrono::seconds(5), [&] { return asked_.size() >= n; });
    return asked_;
  }

 private:
  data::ArrayDataset inner_;
  int64_t fail_at_;
  mutable std::mutex mu_;
  mutable std::condition_variable cv_;
  mutable std::vector<int64_t> asked_;
};

std::vector<std::vector<int>> epoch_rows(const data::DataLoader& loader) {
  std::vector<std::vector<int>> out;
  for (auto& [x, y] : loader) {
    EXPECT_EQ(y.to_vector<int>()[0], 10 * x.to_vector<int>()[0]);
    out.push_back(x.to_vector<int>());
  }
  return out;
}

}  // namespace

TEST(DataLoader, ReadingAheadGivesTheSameBatches) {
  auto ds = indices_dataset(50);
  for (int prefetch : {1, 2, 8}) {
    for (int64_t start : {0, 3}) {
      auto o = opts(true, data::Remainder::pad, 5);
      data::DataLoader plain(ds, 6, o, data::Shard(1, 3));
      o.prefetch = prefetch;
      data::DataLoader ahead(ds, 6, o, data::Shard(1, 3));
      for (int64_t epoch : {0, 2}) {
        plain.set_epoch(epoch);
        ahead.set_epoch(epoch);
        plain.set_start_batch(start);
        ahead.set_start_batch(start);
        EXPECT_EQ(epoch_rows(ahead), epoch_rows(plain)) << "prefetch " << prefetch << " epoch " << epoch;
        EXPECT_EQ(epoch_rows(ahead).size(), size_t(9 - start));
      }
    }
  }
}

TEST(DataLoader, ReadsAheadOfTheLoopAndStopsWhenItEnds) {
  auto ds = std::make_shared<RecordingDataset>(40);
  auto o = opts(false, data::Remainder::drop);
  o.prefetch = 3;
  data::DataLoader loader(ds, 4, o, data::Shard(0, 1));
  {
    auto it = loader.begin();
    // Before the loop takes anything, the first three batches are read (and no more: the queue is full).
    EXPECT_EQ(ds->wait_for(3), (std::vector<int64_t>{0, 4, 8}));
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    EXPECT_EQ(ds->wait_for(3).size(), 3u);
    expect_array(it->first, {4}, {0, 1, 2, 3});
    // Taking one frees a place: the fourth is read.
    EXPECT_EQ(ds->wait_for(4), (std::vector<int64_t>{0, 4, 8, 12}));
  }  // leaving the loop early stops the reader
  const size_t after = ds->wait_for(4).size();
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  EXPECT_EQ(ds->wait_for(4).size(), after);
  EXPECT_LE(after, 5u);
}

TEST(DataLoader, AReadErrorSurfacesAtItsBatch) {
  auto ds = std::make_shared<RecordingDataset>(40, /*fail_at_first=*/8);
  auto o = opts(false, data::Remainder::drop);
  data::DataLoader loader(ds, 4, o, data::Shard(0, 1));
  std::vector<int> firsts;
  EXPECT_THROW_MSG(
      {
        for (auto& [x, y] : loader) firsts.push_back(x.to_vector<int>()[0]);
      },
      std::runtime_error, "cannot read sample 8");
  EXPECT_EQ(firsts, (std::vector<int>{0, 4}));  // the batches before it arrived
}

TEST(DataLoader, SetEpochInsideALoopChangesTheNextLoop) {
  auto ds = indices_dataset(20);
  for (int prefetch : {0, 2}) {
  auto o = opts(true, data::Remainder::drop);
  o.prefetch = prefetch;
  data::DataLoader loader(ds, 5, o, data::Shard(0, 1));
  data::DataLoader reference(ds, 5, opts(true, data::Remainder::drop), data::Shard(0, 1));
  std::vector<std::vector<int>> got;
  for (auto& [x, y] : loader) {
    got.push_back(x.to_vector<int>());
    loader.set_epoch(1);
  }
  EXPECT_EQ(got, epoch_rows(reference));  // all of epoch 0
  reference.set_epoch(1);
  EXPECT_EQ(epoch_rows(loader), epoch_rows(reference));
  }
  auto bad = opts(true, data::Remainder::drop);
  bad.prefetch = -1;
  EXPECT_THROW_MSG(data::DataLoader(ds, 5, bad, data::Shard(0, 1)), std::invalid_argument,
                   "prefetch must be >= 0 batches, got -1");
}
