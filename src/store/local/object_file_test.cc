// The object file alone: names, trailers and attributes, and every kind of damage to them
// (docs/local-store.md). Each damaged file must read as DataLoss, never as another object.
#include "store/local/object_file.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/xattr.h>

#include "store/local/local_store.h"
#include "store/local/posix_io.h"
#include "store/scratch_dir.h"

namespace objectcache::local {
namespace {

class ObjectFileTest : public ::testing::Test {
 protected:
  ObjectFileTest() : dir_(MakeScratchDir()) { ::mkdir(dir_.c_str(), 0755); }
  ~ObjectFileTest() override { RemoveTree(dir_); }

  // Writes `bytes` to a fresh file and returns it open for reading and writing.
  Fd File(const std::string& bytes) {
    const std::string path = dir_ + "/f" + std::to_string(files_++);
    Fd fd(::open(path.c_str(), O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0644));
    EXPECT_TRUE(fd.valid());
    EXPECT_EQ(WriteAll(fd.get(), bytes.data(), bytes.size()), 0);
    return fd;
  }
  static StatusCode Read(const Fd& fd, uint64_t size, std::optional<std::string_view> key) {
    Result<Trailer> t = ReadTrailer(fd.get(), size, key);
    return t.has_value() ? StatusCode::kOk : t.error().code();
  }

  std::string dir_;
  int files_ = 0;
};

TEST_F(ObjectFileTest, ATrailerRoundTripsWithOrWithoutTheKeyExpected) {
  const std::string payload = "payload bytes", key = "bucket/some key";
  const std::string file = payload + MakeTrailer(key, payload.size(), 42);
  Fd fd = File(file);
  for (std::optional<std::string_view> expect :
       {std::optional<std::string_view>(key), std::optional<std::string_view>()}) {
    Result<Trailer> t = ReadTrailer(fd.get(), file.size(), expect);
    ASSERT_TRUE(t.has_value()) << t.error().ToString();
    EXPECT_EQ(t->key, key);
    EXPECT_EQ(t->payload_len, payload.size());
    EXPECT_EQ(t->payload_checksum, 42u);
  }
}

TEST_F(ObjectFileTest, EveryDamageIsDataLoss) {
  const std::string payload = "payload bytes", key = "k";
  const std::string good = payload + MakeTrailer(key, payload.size(), 7);
  // Each byte of the trailer flipped in turn: magic, lengths, checksum, version, key.
  for (size_t at = payload.size(); at < good.size(); ++at) {
    std::string bad = good;
    bad[at] ^= 0x40;
    Fd fd = File(bad);
    EXPECT_EQ(Read(fd, bad.size(), key), StatusCode::kDataLoss) << "byte " << at;
    EXPECT_EQ(Read(fd, bad.size(), std::nullopt), StatusCode::kDataLoss) << "byte " << at;
  }
  // Cut short (a power loss before the footer was written), or grown by junk.
  for (size_t keep : {size_t{0}, size_t{5}, good.size() - 1}) {
    Fd fd = File(good.substr(0, keep));
    EXPECT_EQ(Read(fd, keep, key), StatusCode::kDataLoss) << keep;
  }
  const std::string grown = "x" + good;
  Fd fd = File(grown);
  EXPECT_EQ(Read(fd, grown.size(), key), StatusCode::kDataLoss);
  // A whole, valid file of another key.
  Fd other = File(good);
  EXPECT_EQ(Read(other, good.size(), std::string_view("j")), StatusCode::kDataLoss);
}

TEST_F(ObjectFileTest, AttributesAreCheckedAgainstTheirKey) {
  Fd fd = File("v");
  Result<std::string> none = GetAttributes(fd.get(), "k");
  ASSERT_TRUE(none.has_value());
  EXPECT_EQ(*none, "");
  if (WriteAttributesXattr(fd.get(), "k", "{\"etag\":\"e\"}") == ENOTSUP) {
    GTEST_SKIP() << "no user extended attributes on this file system";
  }
  EXPECT_EQ(*GetAttributes(fd.get(), "k"), "{\"etag\":\"e\"}");
  // The same bytes read for another key (a file renamed over another), or altered.
  EXPECT_EQ(GetAttributes(fd.get(), "j").error().code(), StatusCode::kDataLoss);
  char raw[256];
  const ssize_t n = ::fgetxattr(fd.get(), "user.objectcache.attrs", raw, sizeof(raw));
  ASSERT_GT(n, 8);
  raw[0] ^= 1;
  ASSERT_EQ(::fsetxattr(fd.get(), "user.objectcache.attrs", raw, static_cast<size_t>(n), 0), 0);
  EXPECT_EQ(GetAttributes(fd.get(), "k").error().code(), StatusCode::kDataLoss);
  ASSERT_EQ(::fsetxattr(fd.get(), "user.objectcache.attrs", raw, 3, 0), 0);
  EXPECT_EQ(GetAttributes(fd.get(), "k").error().code(), StatusCode::kDataLoss);
}

TEST_F(ObjectFileTest, FilesOpenForReadingWithoutAccessTimeUpdates) {
  File("bytes");  // f0, ours
  Fd dir(::open(dir_.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
  ASSERT_TRUE(dir.valid());
  Fd f(OpenForReading(dir.get(), "f0"));
  ASSERT_TRUE(f.valid());
  EXPECT_NE(::fcntl(f.get(), F_GETFL) & O_NOATIME, 0);
  char c[5];
  EXPECT_EQ(PreadAll(f.get(), std::as_writable_bytes(std::span(c)), 0), 0);
  EXPECT_EQ(std::string_view(c, 5), "bytes");
  errno = 0;
  EXPECT_LT(OpenForReading(dir.get(), "absent"), 0);
  EXPECT_EQ(errno, ENOENT);
}

TEST_F(ObjectFileTest, FileNamesDecodeBackToTheirKeys) {
  for (std::string key : {"plain", "bucket/with space", ".bucket/b", "ünïcode", "%41", "a.b-c_d"}) {
    const std::string name = LocalStoreFileName(key);
    EXPECT_EQ(name.find('/'), std::string::npos) << key;
    EXPECT_NE(name.front(), '.') << key;  // never hidden, never . or ..
    EXPECT_EQ(DecodeFileName(name), key) << name;
  }
  // A long name is hashed: the key then lives only in the trailer.
  const std::string long_key(300, 'k');
  EXPECT_EQ(LocalStoreFileName(long_key).front(), '~');
  EXPECT_EQ(DecodeFileName(LocalStoreFileName(long_key)), std::nullopt);
  for (std::string junk : {"", "a%", "a%zz", "has space", "%2e"}) {
    EXPECT_EQ(DecodeFileName(junk), std::nullopt) << junk;
  }
}

}  // namespace
}  // namespace objectcache::local
