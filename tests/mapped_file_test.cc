// MappedFile in both residencies gives the file's exact bytes; errors name the file;
// AlignedBuffer's huge-page and heap sizes are zeroed and aligned.
#include <fcntl.h>
#include <unistd.h>

#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <random>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "base/aligned_buffer.h"
#include "base/huge_pages.h"
#include "base/mapped_file.h"

namespace latte {
namespace {

class TempFile {
 public:
  explicit TempFile(const std::vector<uint8_t>& bytes) {
    std::string tmpl = (std::filesystem::temp_directory_path() / "latte-mapped-XXXXXX").string();
    const int fd = ::mkstemp(tmpl.data());
    EXPECT_GE(fd, 0);
    path_ = tmpl;
    size_t done = 0;
    while (done < bytes.size()) {
      const ssize_t n = ::write(fd, bytes.data() + done, bytes.size() - done);
      if (n <= 0) break;
      done += static_cast<size_t>(n);
    }
    ::close(fd);
  }
  ~TempFile() { std::remove(path_.c_str()); }
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

std::vector<uint8_t> RandomBytes(size_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::vector<uint8_t> v(n);
  for (uint8_t& b : v) b = static_cast<uint8_t>(rng());
  return v;
}

TEST(MappedFile, BothResidenciesHoldTheFileBytes) {
  // Sizes around the huge-page size and the 64 MiB read chunk, and a small one.
  for (size_t size : {size_t{1}, size_t{4097}, kHugePageBytes - 1, kHugePageBytes + 3, (size_t{64} << 20) + 12345}) {
    SCOPED_TRACE("size=" + std::to_string(size));
    const std::vector<uint8_t> bytes = RandomBytes(size, static_cast<uint32_t>(size));
    const TempFile file(bytes);
    for (FileResidency residency : {FileResidency::kHugePageCopy, FileResidency::kMapped}) {
      auto opened = MappedFile::Open(file.path(), residency);
      ASSERT_TRUE(opened.ok()) << opened.status().message();
      const MappedFile& f = **opened;
      EXPECT_EQ(f.residency(), residency);
      ASSERT_EQ(f.size(), size);
      EXPECT_EQ(std::memcmp(f.data(), bytes.data(), size), 0);
    }
  }
}

// A huge-page copy puts the byte it is given on a 64-byte line; a mapping keeps the
// file's offsets (its data starts a page).
TEST(MappedFile, HugePageCopyPutsTheGivenByteOnALine) {
  const std::vector<uint8_t> bytes = RandomBytes(5000, 7);
  const TempFile file(bytes);
  for (size_t line_offset : {size_t{0}, size_t{8}, size_t{24}, size_t{63}, size_t{64}, size_t{1000}}) {
    SCOPED_TRACE("line_offset=" + std::to_string(line_offset));
    for (FileResidency residency : {FileResidency::kHugePageCopy, FileResidency::kMapped}) {
      auto opened = MappedFile::Open(file.path(), residency, nullptr, line_offset);
      ASSERT_TRUE(opened.ok()) << opened.status().message();
      const MappedFile& f = **opened;
      ASSERT_EQ(f.size(), bytes.size());
      EXPECT_EQ(std::memcmp(f.data(), bytes.data(), bytes.size()), 0);
      const uintptr_t at = reinterpret_cast<uintptr_t>(f.data());
      EXPECT_EQ((at + (residency == FileResidency::kHugePageCopy ? line_offset : 0)) % 64, 0u);
    }
  }
}

TEST(MappedFile, EmptyFileHasNoData) {
  const TempFile file({});
  for (FileResidency residency : {FileResidency::kHugePageCopy, FileResidency::kMapped}) {
    auto opened = MappedFile::Open(file.path(), residency);
    ASSERT_TRUE(opened.ok()) << opened.status().message();
    EXPECT_EQ((*opened)->size(), 0u);
  }
}

TEST(MappedFile, ErrorsNameThePath) {
  const std::string missing = (std::filesystem::temp_directory_path() / "latte-no-such-file").string();
  auto r = MappedFile::Open(missing);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find(missing + ": cannot open"), std::string::npos) << r.status().message();
  auto dir = MappedFile::Open(std::filesystem::temp_directory_path().string());
  ASSERT_FALSE(dir.ok());
  EXPECT_NE(dir.status().message().find("not a regular file"), std::string::npos) << dir.status().message();
}

TEST(AlignedBuffer, SmallAndHugeBuffersAreZeroedAndAligned) {
  for (size_t size : {size_t{100}, kHugePageBytes - 64, kHugePageBytes, 3 * kHugePageBytes + 1}) {
    SCOPED_TRACE("size=" + std::to_string(size));
    AlignedBuffer b(size);
    ASSERT_NE(b.data(), nullptr);
    EXPECT_EQ(reinterpret_cast<uintptr_t>(b.data()) % AlignedBuffer::kAlignment, 0u);
    if (size >= kHugePageBytes) {
      EXPECT_EQ(reinterpret_cast<uintptr_t>(b.data()) % kHugePageBytes, 0u);
    }
    std::vector<std::byte> zeros(size);
    EXPECT_EQ(std::memcmp(b.data(), zeros.data(), size), 0);
    std::memset(b.data(), 0xAB, size);   // the whole size is writable
    AlignedBuffer moved = std::move(b);  // and ownership moves (freed once, by `moved`)
    EXPECT_EQ(moved.size(), size);
    EXPECT_EQ(b.data(), nullptr);
  }
}

}  // namespace
}  // namespace latte
