#include "store/local/local_store.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>

#include "store/local/object_file.h"
#include "store/store_conformance.h"

namespace objectcache {
namespace {

constexpr uint64_t kBlock = 4096;  // the unit the capacity counts files in
using local::kFooterBytes;
using local::ObjectFileFootprint;

namespace fs = std::filesystem;

INSTANTIATE_TEST_SUITE_P(Local, StoreConformanceTest,
                         ::testing::Values(StoreFactory{
                             "local",
                             [](const std::string& dir) { return OpenLocalStore({.root = dir}); }}),
                         [](const auto& param_info) { return param_info.param.name; });

class LocalStoreTest : public ::testing::Test {
 protected:
  void SetUp() override { dir_ = MakeScratchDir(); }
  void TearDown() override { RemoveTree(dir_); }

  std::unique_ptr<Store> Open(LocalStoreOptions options = {},
                              LocalStoreOpenStats* stats = nullptr) {
    options.root = dir_;
    Result<std::unique_ptr<Store>> s = OpenLocalStore(options, stats);
    EXPECT_TRUE(s.has_value()) << s.error().ToString();
    return s.has_value() ? std::move(*s) : nullptr;
  }
  // The file holding `key`, found by name in any shard directory.
  fs::path FileOf(std::string_view key) {
    for (const auto& shard : fs::directory_iterator(fs::path(dir_) / "objects")) {
      fs::path p = shard.path() / LocalStoreFileName(key);
      if (fs::exists(p)) return p;
    }
    return {};
  }

  std::string dir_;
};

TEST_F(LocalStoreTest, TheStoreIsReadableByItsOwnerOnly) {
  // A store the server creates, whatever the umask: directories 0700, files 0600.
  const mode_t umask_before = ::umask(0);
  const std::string root = dir_ + "/new/store";
  {
    Result<std::unique_ptr<Store>> s = OpenLocalStore({.root = root});
    ASSERT_TRUE(s.has_value()) << s.error().ToString();
    ASSERT_TRUE((*s)->Put("k", AsBytes(std::string(5000, 'v'))).ok());
  }
  ::umask(umask_before);
  size_t files = 0;
  EXPECT_EQ(fs::status(root).permissions() & fs::perms::all, fs::perms::owner_all);
  for (const auto& e : fs::recursive_directory_iterator(root)) {
    const fs::perms p = e.symlink_status().permissions() & fs::perms::all;
    if (e.is_directory()) {
      EXPECT_EQ(p, fs::perms::owner_all) << e.path();
    } else {
      EXPECT_EQ(p, fs::perms::owner_read | fs::perms::owner_write) << e.path();
      ++files;
    }
  }
  EXPECT_GE(files, 3u);  // FORMAT, LOCK, the object
}

TEST_F(LocalStoreTest, SecondOpenOfTheSameDirectoryIsRefused) {
  auto store = Open();
  Result<std::unique_ptr<Store>> second = OpenLocalStore({.root = dir_});
  ASSERT_FALSE(second.has_value());
  EXPECT_EQ(second.error().code(), StatusCode::kFailedPrecondition);
  store.reset();
  EXPECT_TRUE(OpenLocalStore({.root = dir_}).has_value());
}

TEST_F(LocalStoreTest, ForeignNonEmptyDirectoryIsRefusedAndLeftAlone) {
  fs::create_directories(dir_);
  std::ofstream(fs::path(dir_) / "thesis.tex") << "precious";
  Result<std::unique_ptr<Store>> s = OpenLocalStore({.root = dir_});
  ASSERT_FALSE(s.has_value());
  EXPECT_EQ(s.error().code(), StatusCode::kFailedPrecondition);
  EXPECT_EQ(std::distance(fs::directory_iterator(dir_), fs::directory_iterator()), 1);
}

TEST_F(LocalStoreTest, ACreationKilledBeforeItsFormatFileWasInPlaceStartsAgain) {
  fs::create_directories(dir_);
  std::ofstream(fs::path(dir_) / "LOCK");
  std::ofstream(fs::path(dir_) / "FORMAT.tmp") << "objectcache loc";  // cut short
  auto store = Open();
  ASSERT_TRUE(store->Put("k", AsBytes(std::string("v"))).ok());
  EXPECT_TRUE(fs::exists(fs::path(dir_) / "FORMAT"));
  EXPECT_FALSE(fs::exists(fs::path(dir_) / "FORMAT.tmp"));
}

TEST_F(LocalStoreTest, UnknownFormatVersionIsRefused) {
  Open().reset();
  std::ofstream(fs::path(dir_) / "FORMAT", std::ios::trunc) << "objectcache local store v9\n";
  Result<std::unique_ptr<Store>> s = OpenLocalStore({.root = dir_});
  ASSERT_FALSE(s.has_value());
  EXPECT_EQ(s.error().code(), StatusCode::kFailedPrecondition);
}

TEST_F(LocalStoreTest, LeftoverTemporaryFilesAreRemovedAndNeverServed) {
  Open().reset();
  std::ofstream(fs::path(dir_) / "tmp" / "17") << "half a write";
  LocalStoreOpenStats stats;
  auto store = Open({}, &stats);
  EXPECT_EQ(stats.removed_temp_files, 1u);
  EXPECT_EQ(stats.objects, 0u);
  EXPECT_TRUE(fs::is_empty(fs::path(dir_) / "tmp"));
}

TEST_F(LocalStoreTest, TruncatedObjectFileIsDataLossThenGone) {
  auto store = Open();
  std::string value(10000, 'v');
  ASSERT_TRUE(store->Put("k", AsBytes(value)).ok());
  fs::resize_file(FileOf("k"), 6000);  // as a power loss without fsync might leave it
  std::string buf(10000, '\0');
  EXPECT_EQ(store->Retrieve("k", AsWritableBytes(buf)).status().code(), StatusCode::kDataLoss);
  EXPECT_EQ(store->Stat("k").status().code(), StatusCode::kNotFound);
  EXPECT_TRUE(FileOf("k").empty());
}

TEST_F(LocalStoreTest, BitFlipInPayloadIsDataLossOnWholeRead) {
  auto store = Open();
  std::string value(10000, 'v');
  ASSERT_TRUE(store->Put("k", AsBytes(value)).ok());
  {
    std::fstream f(FileOf("k"), std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(1234);
    f.put('w');
  }
  std::string buf(10000, '\0');
  EXPECT_EQ(store->Retrieve("k", AsWritableBytes(buf)).status().code(), StatusCode::kDataLoss);
}

TEST_F(LocalStoreTest, DamagedFilesFoundAtOpenAreRemoved) {
  auto store = Open();
  ASSERT_TRUE(store->Put("good", AsBytes(std::string(100, 'g'))).ok());
  ASSERT_TRUE(store->Put("short", AsBytes(std::string(100, 's'))).ok());
  fs::path shard = FileOf("short").parent_path();
  store.reset();
  fs::resize_file(FileOf("short"), 3);            // shorter than its trailer
  std::ofstream(shard / "bad%zzname") << "junk";  // not a name this store writes
  LocalStoreOpenStats stats;
  store = Open({}, &stats);
  EXPECT_EQ(stats.objects, 1u);
  EXPECT_EQ(stats.removed_damaged_files, 2u);
  EXPECT_EQ(*ReadWholeObject(*store, "good"), std::string(100, 'g'));
}

// The objects, sizes and order a listing shows.
std::vector<ObjectInfo> ListAll(Store& store) {
  ListPage page = *store.List({.prefix = "", .start_after = "", .max_keys = 100000});
  return page.objects;
}

void ExpectSameObjects(const std::vector<ObjectInfo>& got, const std::vector<ObjectInfo>& want) {
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < got.size(); ++i) {
    EXPECT_EQ(got[i].key, want[i].key);
    EXPECT_EQ(got[i].size, want[i].size);
  }
}

TEST_F(LocalStoreTest, ARestartReadsTheIndexItsCloseWrote) {
  const int64_t until = static_cast<int64_t>(std::time(nullptr)) + 3600;
  const std::string chunk = "kv/6d0f5c5d66016c150b2cafada81c8810";
  std::vector<ObjectInfo> before;
  {
    auto store = Open();
    for (int i = 0; i < 300; ++i) {
      ASSERT_TRUE(store->Put("o" + std::to_string(i), AsBytes(std::string(i, 'x'))).ok());
    }
    ASSERT_TRUE(store->Put(chunk, AsBytes("chunk")).ok());
    ASSERT_TRUE(store->Put(".bucket/b", AsBytes("record")).ok());
    ASSERT_TRUE(store->Put(std::string(1000, 'L'), AsBytes("long")).ok());
    ASSERT_TRUE(store->Pin("o0", until).ok());
    ASSERT_TRUE(store->Delete("o7").ok());
    ASSERT_TRUE(ReadWholeObject(*store, "o1").has_value());  // o1 is now the most recent
    before = ListAll(*store);
  }
  ASSERT_TRUE(fs::exists(fs::path(dir_) / "INDEX"));
  LocalStoreOpenStats stats;
  {
    auto store = Open({}, &stats);
    EXPECT_TRUE(stats.index_file) << stats.index_file_refused;
    EXPECT_FALSE(
        fs::exists(fs::path(dir_) / "INDEX"));  // a crash from now on reads the directories
    ExpectSameObjects(ListAll(*store), before);
    EXPECT_EQ(*ReadWholeObject(*store, chunk), "chunk");
  }
  // The order of use survived two restarts: with room for 300 objects, the two oldest went (o0
  // is pinned), and o1, used last, stayed.
  auto store = Open({.capacity_bytes = 300 * kBlock}, &stats);
  EXPECT_TRUE(stats.index_file) << stats.index_file_refused;
  EXPECT_EQ(store->Usage().objects, 300u);
  EXPECT_TRUE(store->Stat("o0").has_value());
  EXPECT_TRUE(store->Stat("o1").has_value());
  EXPECT_EQ(store->Stat("o2").status().code(), StatusCode::kNotFound);
  EXPECT_EQ(store->Stat("o3").status().code(), StatusCode::kNotFound);
  EXPECT_TRUE(store->Stat("o4").has_value());
}

TEST_F(LocalStoreTest, AStaleOrDamagedIndexFileIsNotUsed) {
  const fs::path index = fs::path(dir_) / "INDEX";
  {
    auto store = Open();
    for (int i = 0; i < 50; ++i) {
      ASSERT_TRUE(store->Put("o" + std::to_string(i), AsBytes(std::string(i, 'x'))).ok());
    }
  }
  const fs::path saved = fs::path(dir_) / "INDEX.saved";
  fs::copy_file(index, saved);
  std::vector<ObjectInfo> want;
  {
    // An open that did not use the file (an older build, say) writes an object; the file from
    // before no longer describes the directories.
    fs::remove(index);
    auto store = Open();
    ASSERT_TRUE(store->Put("new", AsBytes("n")).ok());
    // The directory's time, moved on as a later write would (timestamps are coarse).
    struct timespec times[2] = {{0, UTIME_OMIT}, {1000000, 0}};
    ASSERT_EQ(::utimensat(AT_FDCWD, FileOf("new").parent_path().c_str(), times, 0), 0);
    want = ListAll(*store);
  }
  fs::rename(saved, index);
  LocalStoreOpenStats stats;
  ExpectSameObjects(ListAll(*Open({}, &stats)), want);
  EXPECT_FALSE(stats.index_file);
  EXPECT_NE(stats.index_file_refused.find("changed"), std::string::npos)
      << stats.index_file_refused;

  // Damaged: one byte flipped, or cut short.
  for (const bool truncate : {false, true}) {
    SCOPED_TRACE(truncate);
    ASSERT_TRUE(fs::exists(index));  // the last close wrote it
    if (truncate) {
      fs::resize_file(index, fs::file_size(index) - 20);
    } else {
      std::fstream f(index, std::ios::in | std::ios::out | std::ios::binary);
      f.seekp(static_cast<std::streamoff>(fs::file_size(index) / 2));
      f.put('\x7f');
    }
    ExpectSameObjects(ListAll(*Open({}, &stats)), want);
    EXPECT_FALSE(stats.index_file);
    EXPECT_NE(stats.index_file_refused.find("index file"), std::string::npos);
  }
}

TEST_F(LocalStoreTest, LongNamesAreHashedAndRecoveredAtOpen) {
  std::string long_key(900, 'L');
  long_key += "/tail";
  EXPECT_TRUE(LocalStoreFileName(long_key).starts_with("~"));
  EXPECT_EQ(LocalStoreFileName("6d0f5c5d66016c150b2cafada81c8810"),
            "6d0f5c5d66016c150b2cafada81c8810");
  EXPECT_EQ(LocalStoreFileName("a/b c"), "a%2Fb%20c");
  EXPECT_EQ(LocalStoreFileName(".."), "%2E.");
  auto store = Open();
  ASSERT_TRUE(store->Put(long_key, AsBytes("long")).ok());
  store.reset();
  store = Open();
  EXPECT_EQ(*ReadWholeObject(*store, long_key), "long");
}

TEST_F(LocalStoreTest, CapacityEvictsLeastRecentlyUsedWholeObjects) {
  auto store = Open({.capacity_bytes = 3 * kBlock});
  std::string kb(1000, 'x');
  ASSERT_TRUE(store->Put("a", AsBytes(kb)).ok());
  ASSERT_TRUE(store->Put("b", AsBytes(kb)).ok());
  ASSERT_TRUE(store->Put("c", AsBytes(kb)).ok());
  ASSERT_TRUE(ReadWholeObject(*store, "a").has_value());  // a is now more recent than b
  ASSERT_TRUE(store->Put("d", AsBytes(kb)).ok());
  EXPECT_EQ(store->Stat("b").status().code(), StatusCode::kNotFound);
  for (const char* k : {"a", "c", "d"}) EXPECT_TRUE(store->Stat(k).has_value()) << k;
  EXPECT_EQ(store->Usage().evictions, 1u);
  EXPECT_EQ(store->Usage().bytes, 3000u);
  EXPECT_TRUE(FileOf("b").empty());
  // The capacity counts files in 4 KiB blocks: 3 blocks of payload need a fourth for the rest.
  EXPECT_EQ(store->Put("huge", AsBytes(std::string(3 * kBlock, 'h'))).code(),
            StatusCode::kResourceExhausted);
}

TEST(ObjectFileFootprintTest, PayloadNameAndFooterInWholeBlocks) {
  EXPECT_EQ(ObjectFileFootprint(0, 1), kBlock);
  EXPECT_EQ(ObjectFileFootprint(kBlock - kFooterBytes - 1, 1), kBlock);
  EXPECT_EQ(ObjectFileFootprint(kBlock - kFooterBytes, 1), 2 * kBlock);
  EXPECT_EQ(ObjectFileFootprint(2 << 20, 32), (2 << 20) + kBlock);  // a chunk: one block more
  EXPECT_EQ(ObjectFileFootprint(UINT64_MAX - kBlock, 1024), UINT64_MAX);
  EXPECT_EQ(ObjectFileFootprint(UINT64_MAX, SIZE_MAX), UINT64_MAX);
  EXPECT_EQ(ObjectFileFootprint(0, SIZE_MAX), UINT64_MAX);
  EXPECT_EQ(ObjectFileFootprint(UINT64_MAX - kFooterBytes - 1, 1), UINT64_MAX);
}

TEST_F(LocalStoreTest, TinyObjectsFillTheCapacityByTheirFiles) {
  // Counted by payload, 1-byte objects would take 4096 times the capacity on disk (and an index
  // entry each): counted by their files, 16 of them fill 64 KiB.
  auto store = Open({.capacity_bytes = 16 * kBlock});
  for (int i = 0; i < 100; ++i) {
    ASSERT_TRUE(store->Put("t" + std::to_string(i), AsBytes("x")).ok());
  }
  EXPECT_EQ(store->Usage().objects, 16u);
  EXPECT_EQ(store->Usage().bytes, 16u);
  EXPECT_EQ(store->Usage().evictions, 84u);
  for (int i = 84; i < 100; ++i) EXPECT_TRUE(store->Stat("t" + std::to_string(i)).has_value());
  // The same after a restart, when the totals come from the files.
  store.reset();
  store = Open({.capacity_bytes = 8 * kBlock});
  EXPECT_EQ(store->Usage().objects, 8u);
}

TEST_F(LocalStoreTest, CapacityNeverEvictsRecords) {
  // Regression: with --capacity the LRU evicted bucket and multipart records like any object.
  auto store = Open({.capacity_bytes = 3 * kBlock});
  std::string kb(1000, 'x');
  ASSERT_TRUE(store->Put(".bucket/b", AsBytes(kb)).ok());
  ASSERT_TRUE(store->Put(".mpu/u/00001", AsBytes(kb)).ok());
  for (int i = 0; i < 10; ++i) {
    ASSERT_TRUE(store->Put("b/o" + std::to_string(i), AsBytes(kb)).ok());
  }
  EXPECT_TRUE(store->Stat(".bucket/b").has_value());
  EXPECT_TRUE(store->Stat(".mpu/u/00001").has_value());
  EXPECT_TRUE(store->Stat("b/o9").has_value());
  EXPECT_EQ(store->Usage().bytes, 3000u);
  // Also after a restart, when recency comes from the files.
  store.reset();
  store = Open({.capacity_bytes = kBlock + kBlock / 2});
  EXPECT_TRUE(store->Stat(".bucket/b").has_value());
  EXPECT_TRUE(store->Stat(".mpu/u/00001").has_value());
  EXPECT_EQ(store->Usage().objects, 2u);
}

TEST_F(LocalStoreTest, RecordsStayWithinTheCapacity) {
  // Regression: records are never evicted, so the parts of unfinished multipart uploads grew
  // past an evicting store's capacity without bound. They are refused once they would fill it.
  auto store = Open({.capacity_bytes = 3 * kBlock});
  std::string kb(1000, 'x');
  for (int i = 1; i <= 3; ++i) {
    ASSERT_TRUE(store->Put(".mpu/u/0000" + std::to_string(i), AsBytes(kb)).ok());
  }
  EXPECT_EQ(store->Put(".mpu/u/00004", AsBytes(kb)).code(), StatusCode::kResourceExhausted);
  EXPECT_EQ(store->Stat(".mpu/u/00004").status().code(), StatusCode::kNotFound);
  EXPECT_EQ(store->Usage().objects, 3u);
  // An aborted upload gives its room back.
  ASSERT_TRUE(store->Delete(".mpu/u/00003").ok());
  EXPECT_TRUE(store->Put(".mpu/u/00004", AsBytes(kb)).ok());
}

TEST_F(LocalStoreTest, ASharedCapacityBoundsItsStoresTogether) {
  // Regression: a server's --capacity was applied to each tenant's store, so two tenants held
  // twice the disk it allowed. Stores sharing a capacity stay within it together.
  auto shared = std::make_shared<SharedCapacity>(4 * kBlock);
  const std::string other_dir = MakeScratchDir();
  auto first = Open({.shared_capacity = shared});
  Result<std::unique_ptr<Store>> second_or =
      OpenLocalStore({.root = other_dir, .shared_capacity = shared});
  ASSERT_TRUE(second_or.has_value()) << second_or.error().ToString();
  std::unique_ptr<Store> second = std::move(*second_or);
  EXPECT_EQ(first->Capabilities().capacity_bytes, 4 * kBlock);
  EXPECT_TRUE(first->Capabilities().evicts);
  std::string kb(1000, 'x');
  for (int i = 0; i < 4; ++i) ASSERT_TRUE(first->Put("f" + std::to_string(i), AsBytes(kb)).ok());
  // Full, and the second store has nothing of its own to evict: refused, nothing of the first's
  // evicted.
  EXPECT_EQ(second->Put("s0", AsBytes(kb)).code(), StatusCode::kResourceExhausted);
  EXPECT_EQ(first->Usage().objects, 4u);
  // The first store's own writes evict its own oldest.
  ASSERT_TRUE(first->Put("f4", AsBytes(kb)).ok());
  EXPECT_EQ(first->Stat("f0").status().code(), StatusCode::kNotFound);
  EXPECT_EQ(shared->used.load(), 4 * kBlock);
  // Room given back by a delete goes to whichever store writes next; that store then evicts
  // only its own objects to write more.
  ASSERT_TRUE(first->Delete("f1").ok());
  ASSERT_TRUE(second->Put("s0", AsBytes(kb)).ok());
  ASSERT_TRUE(second->Put("s1", AsBytes(kb)).ok());
  EXPECT_EQ(second->Stat("s0").status().code(), StatusCode::kNotFound);
  EXPECT_TRUE(second->Stat("s1").has_value());
  EXPECT_EQ(first->Usage().objects, 3u);
  EXPECT_EQ(shared->used.load(), 4 * kBlock);
  // A closed store gives its share back; one reopened counts its files again.
  first.reset();
  EXPECT_EQ(shared->used.load(), kBlock);
  first = Open({.shared_capacity = shared});
  EXPECT_EQ(shared->used.load(), 4 * kBlock);
  second.reset();
  first.reset();
  EXPECT_EQ(shared->used.load(), 0u);
  RemoveTree(other_dir);
}

TEST_F(LocalStoreTest, PinnedObjectsSurviveEvictionUntilTheyExpire) {
  auto store = Open({.capacity_bytes = 3 * kBlock});
  std::string kb(1000, 'x');
  const int64_t now = static_cast<int64_t>(std::time(nullptr));
  ASSERT_TRUE(store->Put("system-prompt", AsBytes(kb)).ok());
  ASSERT_TRUE(store->Pin("system-prompt", now + 3600).ok());
  ASSERT_TRUE(store->Put("expired", AsBytes(kb)).ok());
  ASSERT_TRUE(store->Pin("expired", now - 1).ok());
  for (int i = 0; i < 10; ++i) {
    ASSERT_TRUE(store->Put("o" + std::to_string(i), AsBytes(kb)).ok());
  }
  EXPECT_TRUE(store->Stat("system-prompt").has_value());  // the oldest, but pinned
  EXPECT_EQ(store->Stat("expired").status().code(), StatusCode::kNotFound);
  EXPECT_TRUE(store->Stat("o9").has_value());
  EXPECT_EQ(store->Usage().bytes, 3000u);
  // The pin is kept with the file: a restart with less room still keeps it.
  store.reset();
  store = Open({.capacity_bytes = kBlock});
  EXPECT_TRUE(store->Stat("system-prompt").has_value());
  EXPECT_EQ(store->Usage().objects, 1u);
  // No room but the pinned object's: what comes next goes first.
  ASSERT_TRUE(store->Put("third", AsBytes(kb)).ok());
  EXPECT_TRUE(store->Stat("system-prompt").has_value());
  EXPECT_EQ(store->Stat("third").status().code(), StatusCode::kNotFound);
  // Over the capacity with everything pinned: eviction stops instead of spinning.
  store.reset();
  store = Open({.capacity_bytes = kBlock / 2});
  EXPECT_TRUE(store->Stat("system-prompt").has_value());
}

TEST_F(LocalStoreTest, ShrunkCapacityEvictsOldestAtOpen) {
  auto store = Open();
  for (int i = 0; i < 5; ++i) {
    ASSERT_TRUE(store->Put("k" + std::to_string(i), AsBytes(std::string(100, 'x'))).ok());
    // Distinct modification times order the rebuilt LRU.
    struct timespec times[2] = {{0, UTIME_OMIT}, {1000000 + i, 0}};
    ASSERT_EQ(::utimensat(AT_FDCWD, FileOf("k" + std::to_string(i)).c_str(), times, 0), 0);
  }
  store.reset();
  store = Open({.capacity_bytes = 2 * kBlock + kBlock / 2});
  EXPECT_EQ(store->Usage().objects, 2u);
  EXPECT_TRUE(store->Stat("k3").has_value());
  EXPECT_TRUE(store->Stat("k4").has_value());
}

TEST_F(LocalStoreTest, ReadsAfterReplaceDeleteOrEvictNeverSeeTheOldFile) {
  auto store = Open({.capacity_bytes = kBlock + kBlock / 2});
  ASSERT_TRUE(store->Put("k", AsBytes("first")).ok());
  EXPECT_EQ(*ReadWholeObject(*store, "k"), "first");  // its file is now kept open
  ASSERT_TRUE(store->Put("k", AsBytes("second!")).ok());
  EXPECT_EQ(*ReadWholeObject(*store, "k"), "second!");
  std::string buf(4, '\0');
  RangeRead r{.key = "k", .offset = 3, .dest = AsWritableBytes(buf)};
  ASSERT_TRUE(store->RetrieveRanges(std::span(&r, 1)).ok());
  EXPECT_EQ(buf, "ond!");
  ASSERT_TRUE(store->Delete("k").ok());
  EXPECT_EQ(ReadWholeObject(*store, "k").error().code(), StatusCode::kNotFound);
  ASSERT_TRUE(store->Put("old", AsBytes(std::string(1500, 'o'))).ok());
  EXPECT_TRUE(ReadWholeObject(*store, "old").has_value());
  ASSERT_TRUE(store->Put("new", AsBytes(std::string(1500, 'n'))).ok());  // evicts "old"
  EXPECT_EQ(ReadWholeObject(*store, "old").error().code(), StatusCode::kNotFound);
}

TEST_F(LocalStoreTest, ManyObjectsReadWithFewOpenFiles) {
  auto store = Open({.max_open_files = 64});  // one per index shard
  for (int i = 0; i < 300; ++i) {
    ASSERT_TRUE(store->Put("o" + std::to_string(i), AsBytes(std::to_string(i))).ok());
  }
  for (int round = 0; round < 2; ++round) {
    for (int i = 0; i < 300; ++i) {
      EXPECT_EQ(*ReadWholeObject(*store, "o" + std::to_string(i)), std::to_string(i));
    }
  }
}

TEST_F(LocalStoreTest, NonBlockingOpenServesOnlyOpenFiles) {
  auto store = Open();
  ASSERT_TRUE(store->Put("k", AsBytes("cached bytes")).ok());
  EXPECT_EQ(store->OpenReaderIfCached("k").status().code(), StatusCode::kUnavailable);
  EXPECT_EQ(store->OpenReaderIfCached("nope").status().code(), StatusCode::kNotFound);
  ASSERT_TRUE(store->OpenReader("k").has_value());  // opens and keeps the file
  Result<std::unique_ptr<ObjectReader>> r = store->OpenReaderIfCached("k");
  ASSERT_TRUE(r.has_value()) << r.error().ToString();
  std::string buf(6, '\0');
  Status s = (*r)->ReadAtIfCached(0, AsWritableBytes(buf));
  // Just written, so in the page cache; a cold page would be Unavailable, never wrong bytes.
  ASSERT_TRUE(s.ok() || s.code() == StatusCode::kUnavailable) << s.ToString();
  if (s.ok()) {
    EXPECT_EQ(buf, "cached");
  }
  EXPECT_EQ((*r)->ReadAtIfCached(10, AsWritableBytes(buf)).code(), StatusCode::kOutOfRange);
  ASSERT_TRUE(store->Put("k", AsBytes("replaced")).ok());
  EXPECT_EQ(store->OpenReaderIfCached("k").status().code(), StatusCode::kUnavailable);
}

TEST_F(LocalStoreTest, DurablePutsWork) {
  auto store = Open({.durable = true});
  ASSERT_TRUE(store->Put("d", AsBytes("durable")).ok());
  ASSERT_TRUE(store->Put("n", AsBytes("not"), {.durable = false}).ok());
  EXPECT_EQ(*ReadWholeObject(*store, "d"), "durable");
}

}  // namespace
}  // namespace objectcache
