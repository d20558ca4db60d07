#include "store/store_conformance.h"

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <filesystem>
#include <functional>
#include <random>
#include <set>
#include <thread>

#include "core/seeded_data.h"
#include "objectcache/chunk_object.h"

namespace objectcache {

void StoreConformanceTest::SetUp() {
  dir_ = MakeScratchDir();
  Result<std::unique_ptr<Store>> s = GetParam().open(dir_);
  ASSERT_TRUE(s.has_value()) << s.error().ToString();
  store_ = std::move(*s);
}

void StoreConformanceTest::TearDown() {
  store_.reset();
  RemoveTree(dir_);
}

void StoreConformanceTest::Reopen() {
  store_.reset();
  Result<std::unique_ptr<Store>> s = GetParam().open(dir_);
  ASSERT_TRUE(s.has_value()) << s.error().ToString();
  store_ = std::move(*s);
}

namespace {

std::string Get(Store& store, std::string_view key) {
  Result<std::string> r = ReadWholeObject(store, key);
  EXPECT_TRUE(r.has_value()) << key << ": " << r.error().ToString();
  return r.value_or("<error>");
}

TEST_P(StoreConformanceTest, PutThenRetrieveRoundTripsEverySize) {
  for (size_t size : {size_t{0}, size_t{1}, size_t{4095}, size_t{4096}, size_t{(1 << 20) + 3}}) {
    std::string key = "obj-" + std::to_string(size);
    std::string value = SeededBytes(size, size);
    ASSERT_TRUE(store_->Put(key, AsBytes(value)).ok());
    EXPECT_EQ(Get(*store_, key), value) << size;
    EXPECT_EQ(store_->Stat(key)->size, size);
  }
}

TEST_P(StoreConformanceTest, OverwriteReplacesTheWholeValue) {
  std::string big = SeededBytes(100000, 1), small = SeededBytes(10, 2);
  ASSERT_TRUE(store_->Put("k", AsBytes(big)).ok());
  ASSERT_TRUE(store_->Put("k", AsBytes(small)).ok());
  EXPECT_EQ(Get(*store_, "k"), small);
  if (store_->Capabilities().tracks_usage) {
    EXPECT_EQ(store_->Usage().objects, 1u);
    EXPECT_EQ(store_->Usage().bytes, 10u);
  }
}

TEST_P(StoreConformanceTest, MissingObjectIsNotFoundEverywhere) {
  char buf[16];
  EXPECT_EQ(store_->Stat("missing").status().code(), StatusCode::kNotFound);
  EXPECT_EQ(store_->Retrieve("missing", std::as_writable_bytes(std::span(buf))).status().code(),
            StatusCode::kNotFound);
  EXPECT_EQ(store_->Delete("missing").code(), StatusCode::kNotFound);
  RangeRead r{.key = "missing", .offset = 0, .dest = std::as_writable_bytes(std::span(buf))};
  ASSERT_TRUE(store_->RetrieveRanges(std::span(&r, 1)).ok());
  EXPECT_EQ(r.status.code(), StatusCode::kNotFound);
}

TEST_P(StoreConformanceTest, RetrieveIntoTooSmallBufferIsResourceExhausted) {
  std::string value = SeededBytes(100, 3);
  ASSERT_TRUE(store_->Put("k", AsBytes(value)).ok());
  std::string buf(99, '\0');
  EXPECT_EQ(store_->Retrieve("k", AsWritableBytes(buf)).status().code(),
            StatusCode::kResourceExhausted);
  std::string exact(100, '\0');
  EXPECT_EQ(*store_->Retrieve("k", AsWritableBytes(exact)), 100u);
  EXPECT_EQ(exact, value);
}

TEST_P(StoreConformanceTest, ManyRangesOfManyObjectsInOneCall) {
  std::string a = SeededBytes(70000, 4), b = SeededBytes(5000, 5);
  ASSERT_TRUE(store_->Put("a", AsBytes(a)).ok());
  ASSERT_TRUE(store_->Put("b", AsBytes(b)).ok());
  std::string d0(4096, 0), d1(100, 0), d2(1, 0), d3(10, 0), d4(0, 0), d5(8, 0), d6(5000, 0);
  std::vector<RangeRead> reads = {
      {.key = "a", .offset = 65536, .dest = AsWritableBytes(d0)},
      {.key = "b", .offset = 4900, .dest = AsWritableBytes(d1)},  // ends exactly at the end
      {.key = "a", .offset = 0, .dest = AsWritableBytes(d2)},
      {.key = "b", .offset = 4995, .dest = AsWritableBytes(d3)},  // passes the end
      {.key = "b", .offset = 5000, .dest = AsWritableBytes(d4)},  // empty range at the end
      {.key = "nope", .offset = 0, .dest = AsWritableBytes(d5)},
      {.key = "b", .offset = 0, .dest = AsWritableBytes(d6)},
  };
  ASSERT_TRUE(store_->RetrieveRanges(reads).ok());
  EXPECT_TRUE(reads[0].status.ok());
  EXPECT_EQ(d0, a.substr(65536, 4096));
  EXPECT_TRUE(reads[1].status.ok());
  EXPECT_EQ(d1, b.substr(4900));
  EXPECT_EQ(d2, a.substr(0, 1));
  EXPECT_EQ(reads[3].status.code(), StatusCode::kOutOfRange);
  EXPECT_TRUE(reads[4].status.ok());
  EXPECT_EQ(reads[5].status.code(), StatusCode::kNotFound);
  EXPECT_EQ(d6, b);
  RangeRead past{.key = "b", .offset = 5001, .dest = AsWritableBytes(d4)};
  ASSERT_TRUE(store_->RetrieveRanges(std::span(&past, 1)).ok());
  EXPECT_EQ(past.status.code(), StatusCode::kOutOfRange);
}

// Ranges of one object that touch, overlap, lie a little or far apart, in any order, with some
// past the end (a store may read nearby ones in one read: each still gets exactly its bytes).
struct WantedRange {
  uint64_t offset;
  size_t size;
  StatusCode code = StatusCode::kOk;
};
std::vector<WantedRange> NearbyAndOverlappingRanges() {
  return {
      {8192, 4096},
      {0, 4096},
      {4096, 4096},  // touching, out of order
      {6000, 5000},
      {16384, 1000},  // overlapping; a small gap
      {200000, 65536},
      {299000, 1000},                                  // far apart; up to the end
      {299500, 1000, StatusCode::kOutOfRange},         // passes the end
      {20000, 0},                                      // empty
      {UINT64_MAX - 10, 20, StatusCode::kOutOfRange},  // its end passes 2^64
      {UINT64_MAX, 0, StatusCode::kOutOfRange},
  };
}

// The reads of NearbyAndOverlappingRanges of "a", each into a buffer of its own.
struct NearbyReads {
  NearbyReads() : wants(NearbyAndOverlappingRanges()) {
    for (const WantedRange& w : wants) dests.emplace_back(w.size, '\0');
    for (size_t i = 0; i < wants.size(); ++i) {
      reads.push_back({.key = "a", .offset = wants[i].offset, .dest = AsWritableBytes(dests[i])});
    }
  }
  NearbyReads(const NearbyReads&) = delete;
  NearbyReads& operator=(const NearbyReads&) = delete;

  // Each read has the status it should, and where OK its bytes of `value`: in its dest, or,
  // read in place, where its `data` says.
  void Check(const std::string& value, bool in_place) const {
    for (size_t i = 0; i < wants.size(); ++i) {
      EXPECT_EQ(reads[i].status.code(), wants[i].code) << i << ": " << reads[i].status.ToString();
      if (wants[i].code != StatusCode::kOk) continue;
      const std::span<const std::byte> got =
          in_place ? reads[i].data : std::span<const std::byte>(reads[i].dest);
      EXPECT_EQ(std::string(reinterpret_cast<const char*>(got.data()), got.size()),
                value.substr(wants[i].offset, wants[i].size))
          << i;
    }
  }

  std::vector<WantedRange> wants;
  std::vector<std::string> dests;
  std::vector<RangeRead> reads;
};

TEST_P(StoreConformanceTest, NearbyAndOverlappingRangesOfOneObjectGetTheirOwnBytes) {
  const std::string a = SeededBytes(300000, 6);
  ASSERT_TRUE(store_->Put("a", AsBytes(a)).ok());
  NearbyReads r;
  ASSERT_TRUE(store_->RetrieveRanges(r.reads).ok());
  r.Check(a, /*in_place=*/false);
}

// The same ranges read in place: each read's `data` has exactly its bytes, wherever the store
// left them, and they stay as read while held, even once the object is replaced and deleted.
TEST_P(StoreConformanceTest, RangesReadInPlaceStayAsReadWhileHeld) {
  const std::string a = SeededBytes(300000, 7);
  ASSERT_TRUE(store_->Put("a", AsBytes(a)).ok());
  NearbyReads r;
  std::string missing(8, '\0');
  r.reads.push_back({.key = "missing", .offset = 0, .dest = AsWritableBytes(missing)});
  HeldMemory held;
  ASSERT_TRUE(store_->RetrieveRangesInPlace(r.reads, &held).ok());
  EXPECT_EQ(r.reads.back().status.code(), StatusCode::kNotFound);
  ASSERT_TRUE(store_->Put("a", AsBytes(SeededBytes(300000, 8))).ok());
  ASSERT_TRUE(store_->Delete("a").ok());
  r.Check(a, /*in_place=*/true);
}

TEST_P(StoreConformanceTest, ExistAndPresentPrefix) {
  std::vector<std::string> keys;
  for (int i = 0; i < 10; ++i) keys.push_back("chunk-" + std::to_string(i));
  for (int i : {0, 1, 2, 3, 5, 6}) ASSERT_TRUE(store_->Put(keys[i], AsBytes("x")).ok());
  std::vector<bool> present = *store_->Exist(keys);
  EXPECT_EQ(present, (std::vector<bool>{1, 1, 1, 1, 0, 1, 1, 0, 0, 0}));
  EXPECT_EQ(*store_->CountPresentPrefix(keys), 4u);
  EXPECT_EQ(*store_->CountPresentPrefix(std::span(keys).subspan(4)), 0u);
  EXPECT_EQ(*store_->CountPresentPrefix({}), 0u);
}

TEST_P(StoreConformanceTest, DeleteRemovesOnlyThatObject) {
  ASSERT_TRUE(store_->Put("a", AsBytes("1")).ok());
  ASSERT_TRUE(store_->Put("b", AsBytes("22")).ok());
  ASSERT_TRUE(store_->Delete("a").ok());
  EXPECT_EQ(store_->Stat("a").status().code(), StatusCode::kNotFound);
  EXPECT_EQ(Get(*store_, "b"), "22");
  if (store_->Capabilities().tracks_usage) {
    EXPECT_EQ(store_->Usage().objects, 1u);
    EXPECT_EQ(store_->Usage().bytes, 2u);
  }
}

TEST_P(StoreConformanceTest, ListIsOrderedFilteredAndPaged) {
  std::set<std::string> want;
  for (int i = 0; i < 60; ++i) {
    std::string key = (i % 3 == 0 ? "logs/" : "kv/") + std::to_string(i * 7919 % 1000);
    ASSERT_TRUE(store_->Put(key, AsBytes(std::string(i, 'v'))).ok());
    if (key.starts_with("kv/")) want.insert(key);
  }
  ASSERT_TRUE(store_->Put("kv", AsBytes("not under kv/")).ok());
  std::vector<std::string> got;
  ListOptions options{.prefix = "kv/", .start_after = "", .max_keys = 7};
  for (int pages = 0; pages < 100; ++pages) {
    Result<ListPage> page = store_->List(options);
    ASSERT_TRUE(page.has_value());
    EXPECT_LE(page->objects.size(), 7u);
    for (const ObjectInfo& o : page->objects) got.push_back(o.key);
    if (!page->truncated) break;
    options.start_after = page->objects.back().key;
  }
  EXPECT_EQ(got, std::vector<std::string>(want.begin(), want.end()));
  ListPage all = *store_->List({.prefix = "", .start_after = "", .max_keys = 1000});
  EXPECT_EQ(all.objects.size(), 61u);
  EXPECT_FALSE(all.truncated);
  EXPECT_TRUE(
      std::is_sorted(all.objects.begin(), all.objects.end(),
                     [](const ObjectInfo& a, const ObjectInfo& b) { return a.key < b.key; }));
  ListPage after = *store_->List({.prefix = "kv/", .start_after = "kw", .max_keys = 10});
  EXPECT_TRUE(after.objects.empty());
  EXPECT_FALSE(after.truncated);
}

TEST_P(StoreConformanceTest, NamesAreOpaqueBytesUpToTheLimit) {
  const size_t max = store_->Capabilities().max_key_bytes;
  std::vector<std::string> names = {"a/b/c",
                                    "../../etc/passwd",
                                    ".",
                                    "..",
                                    ".hidden",
                                    "~tilde",
                                    "100%",
                                    "sp ace",
                                    "caf\xc3\xa9",
                                    std::string("nul\0byte", 8),
                                    "\xff\xfe",
                                    std::string(1024, 'x'),
                                    std::string(300, '/'),
                                    std::string(1023, '%') + "z"};
  if (store_->Capabilities().utf8_names) {
    // Not UTF-8: refused, not stored.
    EXPECT_EQ(store_->Put("\xff\xfe", AsBytes("v")).code(), StatusCode::kInvalidArgument);
    names.erase(std::find(names.begin(), names.end(), "\xff\xfe"));
  }
  for (size_t i = 0; i < names.size(); ++i) {
    std::string value = SeededBytes(i * 10, i);
    ASSERT_TRUE(store_->Put(names[i], AsBytes(value)).ok()) << i;
  }
  for (size_t i = 0; i < names.size(); ++i) {
    EXPECT_EQ(Get(*store_, names[i]), SeededBytes(i * 10, i)) << i;
  }
  EXPECT_EQ(store_->List({.prefix = "", .start_after = "", .max_keys = 100})->objects.size(),
            names.size());
  EXPECT_EQ(store_->Put(std::string(max + 1, 'x'), AsBytes("v")).code(),
            StatusCode::kInvalidArgument);
  EXPECT_EQ(store_->Put("", AsBytes("v")).code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(store_->Stat(std::string(max + 1, 'x')).status().code(), StatusCode::kInvalidArgument);
}

TEST_P(StoreConformanceTest, ChunkLayerIsOneRangeUnderTheHexName) {
  KvLayout layout = FindModelPreset("llama-3.1-8b")->layout;
  ChunkKey key =
      KeyNamespace("llama-3.1-8b", layout).KeysForTokens(std::vector<uint32_t>(16, 1))[0];
  std::string kv = SeededBytes(layout.ChunkKvBytes(), 9);
  std::string object = *EncodeChunkObject(layout, key, AsBytes(kv));
  ASSERT_TRUE(store_->Put(key.ToHex(), AsBytes(object)).ok());
  std::string header(kChunkHeaderRegion, '\0'), slice(layout.LayerSliceBytes(), '\0');
  ChunkHeader geometry = ChunkGeometry(layout, key);
  std::string hex = key.ToHex();
  std::vector<RangeRead> reads = {
      {.key = hex, .offset = 0, .dest = AsWritableBytes(header)},
      {.key = hex, .offset = geometry.LayerOffset(17), .dest = AsWritableBytes(slice)}};
  ASSERT_TRUE(store_->RetrieveRanges(reads).ok());
  ASSERT_TRUE(reads[0].status.ok() && reads[1].status.ok());
  ChunkExpectation expect{.layout = &layout, .key = &key, .object_bytes = object.size()};
  Result<ChunkHeader> h = DecodeChunkHeader(AsBytes(header), expect);
  ASSERT_TRUE(h.has_value()) << h.error().ToString();
  EXPECT_TRUE(VerifyLayerSlice(*h, 17, AsBytes(slice)).ok());
  EXPECT_EQ(slice, kv.substr(17 * layout.LayerSliceBytes(), layout.LayerSliceBytes()));
}

TEST_P(StoreConformanceTest, ConcurrentReadersSeeWholeVersions) {
  // Each value is a version number repeated: a torn read would mix two versions.
  constexpr int kKeys = 4, kWriters = 2, kReaders = 2, kRounds = 150;
  auto value_of = [](uint32_t version, size_t size) {
    std::string v(size, '\0');
    for (size_t i = 0; i + 4 <= size; i += 4) std::memcpy(&v[i], &version, 4);
    return v;
  };
  for (int k = 0; k < kKeys; ++k) {
    ASSERT_TRUE(store_->Put("c" + std::to_string(k), AsBytes(value_of(0, 4096))).ok());
  }
  std::atomic<int> torn{0}, errors{0};
  std::vector<std::thread> threads;
  for (int w = 0; w < kWriters; ++w) {
    threads.emplace_back([&, w] {
      for (int i = 1; i <= kRounds; ++i) {
        uint32_t version = static_cast<uint32_t>(w * kRounds + i);
        size_t size = 4096 * (1 + version % 16);
        if (!store_->Put("c" + std::to_string(i % kKeys), AsBytes(value_of(version, size))).ok()) {
          errors++;
        }
      }
    });
  }
  for (int r = 0; r < kReaders; ++r) {
    threads.emplace_back([&] {
      for (int i = 0; i < kRounds * 2; ++i) {
        Result<std::string> v = ReadWholeObject(*store_, "c" + std::to_string(i % kKeys));
        if (!v.has_value()) {
          errors++;
          continue;
        }
        uint32_t first;
        std::memcpy(&first, v->data(), 4);
        if (*v != value_of(first, v->size())) torn++;
      }
    });
  }
  for (std::thread& t : threads) t.join();
  EXPECT_EQ(torn.load(), 0);
  EXPECT_EQ(errors.load(), 0);
}

// What `writers` racing conditional writes of `key` did: writer w writes "writer w" with
// options(that value), the even ones through Put, the odd ones through a streaming writer;
// `refused` counts those that failed with `refusal`.
struct RaceOutcome {
  int won = -1, succeeded = 0, refused = 0;
};
RaceOutcome RaceConditionalWrites(Store& store, const std::string& key, int writers,
                                  const std::function<PutOptions(const std::string&)>& options,
                                  StatusCode refusal) {
  std::atomic<int> won{-1}, succeeded{0}, refused{0};
  std::vector<std::thread> threads;
  for (int w = 0; w < writers; ++w) {
    threads.emplace_back([&, w] {
      const std::string value = "writer " + std::to_string(w);
      const PutOptions o = options(value);
      Status s;
      if (w % 2 == 0) {
        s = store.Put(key, AsBytes(value), o);
      } else {
        Result<std::unique_ptr<ObjectWriter>> writer = store.NewWriter(key, o);
        s = writer.has_value() ? (*writer)->Append(AsBytes(value)) : writer.error();
        if (s.ok()) s = (*writer)->Commit();
      }
      if (s.ok()) {
        succeeded++;
        won = w;
      } else if (s.code() == refusal) {
        refused++;
      }
    });
  }
  for (std::thread& t : threads) t.join();
  return {.won = won.load(), .succeeded = succeeded.load(), .refused = refused.load()};
}

TEST_P(StoreConformanceTest, ConditionalPutCreatesOnceAmongRacingWriters) {
  if (!store_->Capabilities().conditional_put) {
    EXPECT_EQ(store_->Put("once", AsBytes("x"), {.if_absent = true}).code(),
              StatusCode::kUnimplemented);
    GTEST_SKIP() << "no conditional put";
  }
  // Regression (CreateBucket checked, then wrote): of racing creates exactly one wins, through
  // Put and through a streaming writer alike, and the value is the winner's.
  constexpr int kWriters = 8;
  for (int round = 0; round < 5; ++round) {
    const std::string key = "once" + std::to_string(round);
    const RaceOutcome r = RaceConditionalWrites(
        *store_, key, kWriters, [](const std::string&) { return PutOptions{.if_absent = true}; },
        StatusCode::kAlreadyExists);
    EXPECT_EQ(r.succeeded, 1);
    EXPECT_EQ(r.refused, kWriters - 1);
    EXPECT_EQ(*ReadWholeObject(*store_, key), "writer " + std::to_string(r.won));
  }
  // A plain put still replaces.
  ASSERT_TRUE(store_->Put("once0", AsBytes("replaced")).ok());
  EXPECT_EQ(*ReadWholeObject(*store_, "once0"), "replaced");
}

TEST_P(StoreConformanceTest, CompareAndSwapReplacesOnlyTheVersionItRead) {
  if (!store_->Capabilities().conditional_put) {
    EXPECT_EQ(store_->Put("cas", AsBytes("x"), {.if_attributes = "a"}).code(),
              StatusCode::kUnimplemented);
    EXPECT_EQ(store_->DeleteIf("cas", "a").code(), StatusCode::kUnimplemented);
    GTEST_SKIP() << "no conditional put";
  }
  // Absent: nothing to compare with, nothing created.
  EXPECT_EQ(store_->Put("cas", AsBytes("x"), {.if_attributes = "v0"}).code(),
            StatusCode::kNotFound);
  EXPECT_EQ(store_->Stat("cas").error().code(), StatusCode::kNotFound);
  EXPECT_EQ(store_->DeleteIf("cas", "v0").code(), StatusCode::kNotFound);
  // Of racing writers that all read version v0, exactly one replaces it, through Put and
  // through a streaming writer alike; the others change nothing.
  constexpr int kWriters = 8;
  for (int round = 0; round < 5; ++round) {
    const std::string read = "v" + std::to_string(round);
    ASSERT_TRUE(store_->Put("cas", AsBytes(read), {.attributes = read}).ok());
    const RaceOutcome r = RaceConditionalWrites(
        *store_, "cas", kWriters,
        [&read](const std::string& value) {
          return PutOptions{.attributes = value, .if_attributes = read};
        },
        StatusCode::kFailedPrecondition);
    EXPECT_EQ(r.succeeded, 1);
    EXPECT_EQ(r.refused, kWriters - 1);
    const std::string winner = "writer " + std::to_string(r.won);
    EXPECT_EQ(*ReadWholeObject(*store_, "cas"), winner);
    EXPECT_EQ((*store_->OpenReader("cas"))->attributes(), winner);
  }
  // A conditional delete removes only the version it names.
  ASSERT_TRUE(store_->Put("cas", AsBytes("d"), {.attributes = "d1"}).ok());
  EXPECT_EQ(store_->DeleteIf("cas", "d0").code(), StatusCode::kFailedPrecondition);
  EXPECT_EQ(*ReadWholeObject(*store_, "cas"), "d");
  EXPECT_TRUE(store_->DeleteIf("cas", "d1").ok());
  EXPECT_EQ(store_->Stat("cas").error().code(), StatusCode::kNotFound);
}

TEST_P(StoreConformanceTest, PinNeedsTheObjectAndChangesNoBytes) {
  const int64_t later = static_cast<int64_t>(std::time(nullptr)) + 3600;
  EXPECT_EQ(store_->Pin("absent", later).code(), StatusCode::kNotFound);
  ASSERT_TRUE(store_->Put("pinned", AsBytes("value"), {.attributes = "attrs"}).ok());
  EXPECT_TRUE(store_->Pin("pinned", later).ok());
  EXPECT_TRUE(store_->Pin("pinned", later - 60).ok());  // earlier: already pinned longer
  EXPECT_TRUE(store_->Pin("pinned", 0).ok());
  EXPECT_EQ(Get(*store_, "pinned"), "value");
  auto reader = store_->OpenReader("pinned");
  ASSERT_TRUE(reader.has_value());
  EXPECT_EQ((*reader)->attributes(), "attrs");
  // A pin is not a version: a reader opened before it reads on.
  EXPECT_TRUE(store_->Pin("pinned", later + 60).ok());
  std::string buf(5, '\0');
  EXPECT_TRUE((*reader)->ReadAt(0, AsWritableBytes(buf)).ok());
  EXPECT_EQ(buf, "value");
  ASSERT_TRUE(store_->Delete("pinned").ok());
  EXPECT_EQ(store_->Pin("pinned", later).code(), StatusCode::kNotFound);
}

TEST_P(StoreConformanceTest, StreamingWriterIsInvisibleUntilCommit) {
  std::string value = SeededBytes(3 << 20, 21);
  Result<std::unique_ptr<ObjectWriter>> w =
      store_->NewWriter("streamed", {.attributes = "etag=abc;type=text/plain"});
  ASSERT_TRUE(w.has_value()) << w.error().ToString();
  for (size_t off = 0; off < value.size(); off += 100000) {
    ASSERT_TRUE(
        (*w)->Append(AsBytes(value).subspan(off, std::min<size_t>(100000, value.size() - off)))
            .ok());
    EXPECT_EQ(store_->Stat("streamed").status().code(), StatusCode::kNotFound);
  }
  EXPECT_EQ((*w)->bytes_written(), value.size());
  ASSERT_TRUE((*w)->SetAttributes("etag=def").ok());
  EXPECT_EQ((*w)->SetAttributes(std::string(kMaxAttributeBytes + 1, 'x')).code(),
            StatusCode::kInvalidArgument);
  ASSERT_TRUE((*w)->Commit().ok());
  EXPECT_EQ(Get(*store_, "streamed"), value);
  EXPECT_EQ((*store_->OpenReader("streamed"))->attributes(), "etag=def");
  // An abandoned writer leaves nothing behind.
  {
    auto abandoned = store_->NewWriter("abandoned");
    ASSERT_TRUE(abandoned.has_value());
    ASSERT_TRUE((*abandoned)->Append(AsBytes("partial")).ok());
  }
  EXPECT_EQ(store_->Stat("abandoned").status().code(), StatusCode::kNotFound);
  if (store_->Capabilities().tracks_usage) {
    EXPECT_EQ(store_->Usage().objects, 1u);
  }
}

TEST_P(StoreConformanceTest, ReaderPinsOneVersionWithItsAttributes) {
  std::string v1 = SeededBytes(50000, 1), v2 = SeededBytes(70000, 2);
  ASSERT_TRUE(store_->Put("k", AsBytes(v1), {.attributes = "first"}).ok());
  Result<std::unique_ptr<ObjectReader>> r = store_->OpenReader("k");
  ASSERT_TRUE(r.has_value());
  ASSERT_TRUE(store_->Put("k", AsBytes(v2), {.attributes = "second"}).ok());
  ASSERT_TRUE(store_->Delete("k").ok());
  EXPECT_EQ((*r)->size(), v1.size());
  EXPECT_EQ((*r)->attributes(), "first");
  EXPECT_GT((*r)->mtime(), 1700000000);
  std::string buf(1000, '\0');
  Status read = (*r)->ReadAt(49000, AsWritableBytes(buf));
  if (store_->Capabilities().pinned_readers) {
    ASSERT_TRUE(read.ok()) << read.ToString();
    EXPECT_EQ(buf, v1.substr(49000));
  } else {
    // The version is gone: the read must say so, never hand over another version's bytes.
    EXPECT_TRUE(read.code() == StatusCode::kAborted || read.code() == StatusCode::kNotFound)
        << read.ToString();
  }
  EXPECT_EQ((*r)->ReadAt(49001, AsWritableBytes(buf)).code(), StatusCode::kOutOfRange);
  ASSERT_TRUE(store_->Put("k", AsBytes(v2)).ok());
  EXPECT_EQ((*store_->OpenReader("k"))->attributes(), "");  // replaced with none
  EXPECT_EQ(store_->OpenReader("missing").status().code(), StatusCode::kNotFound);
  EXPECT_EQ(store_->Put("k", AsBytes(v2), {.attributes = std::string(kMaxAttributeBytes + 1, 'a')})
                .code(),
            StatusCode::kInvalidArgument);
}

TEST_P(StoreConformanceTest, PersistentStoreKeepsObjectsAcrossReopen) {
  if (!store_->Capabilities().persistent) GTEST_SKIP() << "not a persistent backend";
  std::string value = SeededBytes(12345, 11);
  ASSERT_TRUE(store_->Put("kept", AsBytes(value), {.attributes = "meta"}).ok());
  ASSERT_TRUE(store_->Put("gone", AsBytes(value)).ok());
  ASSERT_TRUE(store_->Delete("gone").ok());
  Reopen();
  EXPECT_EQ(Get(*store_, "kept"), value);
  EXPECT_EQ((*store_->OpenReader("kept"))->attributes(), "meta");
  EXPECT_EQ(store_->Stat("gone").status().code(), StatusCode::kNotFound);
  if (store_->Capabilities().tracks_usage) {
    EXPECT_EQ(store_->Usage().objects, 1u);
  }
}

}  // namespace
}  // namespace objectcache
