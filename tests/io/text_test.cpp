// The text file reader (io::TextFiles): files memory-mapped and read as one stream of bytes.
#include "loom/io/text.h"

#include "io_test_helpers.h"

using namespace loom;
using loom::iotest::write_bytes;

namespace {

class TextFilesTest : public loom::iotest::TempDirTest {};

std::string read(const io::TextFiles& t, uint64_t off, size_t n) {
  std::string s(n, '\0');
  t.read(off, n, reinterpret_cast<uint8_t*>(s.data()));
  return s;
}

TEST_F(TextFilesTest, OneStreamAcrossFiles) {
  write_bytes(path("a.txt"), "abcdefghij");
  write_bytes(path("empty.txt"), "");
  write_bytes(path("b.txt"), "KLMNO");
  auto t = io::TextFiles::open({path("a.txt"), path("empty.txt"), path("b.txt")});
  EXPECT_EQ(t.size(), 15u);
  EXPECT_EQ(read(t, 0, 15), "abcdefghijKLMNO");
  EXPECT_EQ(read(t, 8, 4), "ijKL");  // across the (empty) file between them
  EXPECT_EQ(read(t, 10, 5), "KLMNO");
  EXPECT_EQ(read(t, 15, 0), "");
  auto copy = t;  // copies share the mappings
  EXPECT_EQ(read(copy, 3, 2), "de");
  EXPECT_THROW_MSG(read(t, 12, 4), std::out_of_range, "bytes [12, 16) are outside the 15 bytes");
  EXPECT_THROW_MSG(read(t, 16, 0), std::out_of_range, "outside the 15 bytes");

  EXPECT_EQ(io::TextFiles::open({}).size(), 0u);
  EXPECT_EQ(io::TextFiles::open({path("empty.txt")}).size(), 0u);
}

TEST_F(TextFilesTest, ErrorsNameTheCallerAndTheFile) {
  write_bytes(path("a.txt"), "abc");
  EXPECT_THROW_MSG(io::TextFiles::open({path("a.txt"), path("nope")}), std::runtime_error,
                   "[TextFiles] '" + path("nope") + "': cannot open");
  EXPECT_THROW_MSG(io::TextFiles::open({path("nope")}, "TextDataset"), std::runtime_error,
                   "[TextDataset] '" + path("nope") + "': cannot open");
  std::filesystem::create_directories(path("adir"));
  EXPECT_THROW_MSG(io::TextFiles::open({path("adir")}), std::runtime_error, "it is a directory");
}

}  // namespace
