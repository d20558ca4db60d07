#include "store/local/object_index.h"

#include <algorithm>
#include <array>
#include <cstring>

namespace objectcache::local {

namespace {

// A record: word 0 is the payload size (48 bits) and the encoded name's length (16 bits); word 1
// the recency stamp (56 bits) and the flags (8 bits); word 2 the recency links (prev, next);
// then the encoded name, padded to whole words.
constexpr unsigned kSizeBits = 48;
constexpr uint64_t kSizeMask = (uint64_t{1} << kSizeBits) - 1;
constexpr unsigned kStampBits = 56;
constexpr uint64_t kStampMask = (uint64_t{1} << kStampBits) - 1;
constexpr uint64_t kDead = 1;     // deleted; still in the name order tables until a merge
constexpr uint64_t kRecord = 2;   // the name starts with '.': never evicted
constexpr uint64_t kHexTail = 4;  // the name's last 32 hex digits are kept as 16 bytes
constexpr uint64_t kPinned = 8;   // has an entry in pins_

constexpr size_t kHexDigits = 32;
constexpr size_t kPackedBytes = kHexDigits / 2;
constexpr size_t kMaxEncodedBytes = kMaxKeyBytes;

// The value of each lowercase hex digit, -1 for any other byte: a table, since a branch on
// random digits is mispredicted about half the time (it doubled the cost of a lookup).
constexpr std::array<int8_t, 256> kHexValue = [] {
  std::array<int8_t, 256> t{};
  for (int c = 0; c < 256; ++c) {
    t[c] = c >= '0' && c <= '9'   ? static_cast<int8_t>(c - '0')
           : c >= 'a' && c <= 'f' ? static_cast<int8_t>(c - 'a' + 10)
                                  : int8_t{-1};
  }
  return t;
}();

int HexValue(char c) { return kHexValue[static_cast<unsigned char>(c)]; }

// A name as the arena keeps it. Lowercase hex digits sort as their values do, so the packed
// bytes of two tails compare as the digits would.
struct EncodedName {
  uint8_t bytes[kMaxEncodedBytes];
  size_t size = 0;
  uint64_t flags = 0;

  explicit EncodedName(std::string_view name) {
    const size_t n = std::min(name.size(), kMaxEncodedBytes);
    int any_not_hex = n >= kHexDigits ? 0 : -1;
    for (size_t i = n - std::min(n, kHexDigits); i < n; ++i) any_not_hex |= HexValue(name[i]);
    const bool hex_tail = any_not_hex >= 0;
    if (!hex_tail) {
      std::memcpy(bytes, name.data(), n);
      size = n;
    } else {
      const size_t prefix = n - kHexDigits;
      std::memcpy(bytes, name.data(), prefix);
      for (size_t i = 0; i < kPackedBytes; ++i) {
        bytes[prefix + i] = static_cast<uint8_t>(HexValue(name[prefix + 2 * i]) << 4 |
                                                 HexValue(name[prefix + 2 * i + 1]));
      }
      size = prefix + kPackedBytes;
      flags = kHexTail;
    }
    if (!name.empty() && name.front() == '.') flags |= kRecord;
  }
};

size_t WordsFor(size_t encoded_bytes) { return 3 + (encoded_bytes + 7) / 8; }

}  // namespace

ObjectIndex::ObjectIndex() { ResizeSlots(16); }

uint64_t ObjectIndex::Flags(EntryId id) const { return Record(id)[1] >> kStampBits; }

void ObjectIndex::SetFlag(EntryId id, uint64_t flag, bool on) {
  uint64_t& w = Record(id)[1];
  w = on ? w | flag << kStampBits : w & ~(flag << kStampBits);
}

size_t ObjectIndex::RecordWords(EntryId id) const { return WordsFor(Record(id)[0] >> kSizeBits); }

uint64_t ObjectIndex::size(EntryId id) const { return Record(id)[0] & kSizeMask; }

void ObjectIndex::set_size(EntryId id, uint64_t size) {
  uint64_t& w = Record(id)[0];
  w = (w & ~kSizeMask) | (size & kSizeMask);
}

uint64_t ObjectIndex::stamp(EntryId id) const { return Record(id)[1] & kStampMask; }

bool ObjectIndex::is_record(EntryId id) const { return (Flags(id) & kRecord) != 0; }

int64_t ObjectIndex::pinned_until(EntryId id) const {
  if ((Flags(id) & kPinned) == 0) return 0;
  return pins_.at(id);
}

void ObjectIndex::set_pinned_until(EntryId id, int64_t until) {
  if (until == 0) {
    pins_.erase(id);
  } else {
    pins_[id] = until;
  }
  SetFlag(id, kPinned, until != 0);
}

std::string_view ObjectIndex::NameInto(EntryId id, char* buf) const {
  const uint64_t* r = Record(id);
  const size_t encoded = r[0] >> kSizeBits;
  const auto* bytes = reinterpret_cast<const uint8_t*>(r + kHeaderWords);
  if ((Flags(id) & kHexTail) == 0) {
    std::memcpy(buf, bytes, encoded);
    return {buf, encoded};
  }
  static constexpr char kDigits[] = "0123456789abcdef";
  const size_t prefix = encoded - kPackedBytes;
  std::memcpy(buf, bytes, prefix);
  for (size_t i = 0; i < kPackedBytes; ++i) {
    buf[prefix + 2 * i] = kDigits[bytes[prefix + i] >> 4];
    buf[prefix + 2 * i + 1] = kDigits[bytes[prefix + i] & 15];
  }
  return {buf, prefix + kHexDigits};
}

std::string ObjectIndex::Name(EntryId id) const {
  char buf[kMaxKeyBytes];
  return std::string(NameInto(id, buf));
}

uint64_t ObjectIndex::HashOf(EntryId id) const {
  char buf[kMaxKeyBytes];
  return KeyHash(NameInto(id, buf));
}

int ObjectIndex::Compare(EntryId a, EntryId b) const {
  const uint64_t* ra = Record(a);
  const uint64_t* rb = Record(b);
  const size_t na = ra[0] >> kSizeBits;
  const size_t nb = rb[0] >> kSizeBits;
  // Two chunk names with prefixes of one length: the prefixes, then the packed digits.
  if ((Flags(a) & kHexTail) != 0 && (Flags(b) & kHexTail) != 0 && na == nb) {
    return std::memcmp(ra + kHeaderWords, rb + kHeaderWords, na);
  }
  if ((Flags(a) & kHexTail) == 0 && (Flags(b) & kHexTail) == 0) {
    const int c = std::memcmp(ra + kHeaderWords, rb + kHeaderWords, std::min(na, nb));
    return c != 0 ? c : (na < nb ? -1 : na > nb);
  }
  char buf[kMaxKeyBytes];
  return -Compare(b, NameInto(a, buf));
}

int ObjectIndex::Compare(EntryId a, std::string_view name) const {
  char buf[kMaxKeyBytes];
  const int c = NameInto(a, buf).compare(name);
  return c < 0 ? -1 : c > 0;
}

// ---- the hash table ------------------------------------------------------------------------

EntryId ObjectIndex::Find(std::string_view name, uint64_t hash) const {
  if (name.empty() || name.size() > kMaxEncodedBytes) return kNoEntry;
  const EncodedName e(name);
  return FindEncoded(e.bytes, e.size, e.flags, hash);
}

EntryId ObjectIndex::FindEncoded(const uint8_t* encoded, size_t encoded_bytes, uint64_t flags,
                                 uint64_t hash) const {
  const uint32_t tag = Tag(hash);
  for (size_t i = Home(hash); slots_[i] != 0; i = NextSlot(i)) {
    if ((slots_[i] & ~kIdMask) != tag) continue;
    const EntryId id = slots_[i] & kIdMask;
    const uint64_t* r = Record(id);
    if ((r[0] >> kSizeBits) == encoded_bytes && ((Flags(id) ^ flags) & kHexTail) == 0 &&
        std::memcmp(r + kHeaderWords, encoded, encoded_bytes) == 0) {
      return id;
    }
  }
  return kNoEntry;
}

void ObjectIndex::Prefetch(uint64_t hash) const { __builtin_prefetch(&slots_[Home(hash)]); }

void ObjectIndex::PrefetchEntry(uint64_t hash) const {
  const uint32_t tag = Tag(hash);
  for (size_t i = Home(hash); slots_[i] != 0; i = NextSlot(i)) {
    if ((slots_[i] & ~kIdMask) == tag) {
      __builtin_prefetch(Record(slots_[i] & kIdMask));
      return;
    }
  }
}

void ObjectIndex::PlaceSlot(EntryId id, uint64_t hash) {
  size_t i = Home(hash);
  while (slots_[i] != 0) i = NextSlot(i);
  slots_[i] = id | Tag(hash);
}

void ObjectIndex::ResizeSlots(size_t capacity) {
  std::vector<uint32_t> old = std::move(slots_);
  slots_.assign(capacity, 0);
  shift_ = 64 - static_cast<unsigned>(__builtin_ctzll(capacity));
  for (uint32_t s : old) {
    if (s != 0) PlaceSlot(s & kIdMask, HashOf(s & kIdMask));
  }
}

void ObjectIndex::EraseSlot(EntryId id) {
  size_t i = Home(HashOf(id));
  while ((slots_[i] & kIdMask) != id) i = NextSlot(i);
  // Backward shift: move later entries of the run into the hole when their home does not lie
  // cyclically in (hole, their position], so every entry stays reachable from its home.
  for (size_t hole = i, j = NextSlot(i);; j = NextSlot(j)) {
    if (slots_[j] == 0) {
      slots_[hole] = 0;
      return;
    }
    const size_t home = Home(HashOf(slots_[j] & kIdMask));
    const bool stays = hole <= j ? (hole < home && home <= j) : (hole < home || home <= j);
    if (!stays) {
      slots_[hole] = slots_[j];
      hole = j;
    }
  }
}

// ---- insertion and removal -----------------------------------------------------------------

bool ObjectIndex::HasRoomFor(std::string_view name) const {
  return used_words_ + WordsFor(name.size()) + (size_t{1} << kBlockWordsLog2) <= kIdMask;
}

EntryId ObjectIndex::Append(const uint8_t* encoded, size_t encoded_bytes, uint64_t flags) {
  constexpr size_t kBlockWords = size_t{1} << kBlockWordsLog2;
  const size_t words = WordsFor(encoded_bytes);
  // A record never spans two blocks.
  if ((used_words_ & (kBlockWords - 1)) + words > kBlockWords) {
    garbage_words_ += kBlockWords - (used_words_ & (kBlockWords - 1));
    used_words_ = (used_words_ | (kBlockWords - 1)) + 1;
  }
  if (used_words_ + words > kIdMask) return kNoEntry;
  if ((used_words_ >> kBlockWordsLog2) >= blocks_.size()) {
    blocks_.push_back(std::make_unique_for_overwrite<uint64_t[]>(kBlockWords));
  }
  const auto id = static_cast<EntryId>(used_words_);
  used_words_ += words;
  uint64_t* r = Record(id);
  r[0] = uint64_t{encoded_bytes} << kSizeBits;
  r[1] = flags << kStampBits;
  r[2] = 0;
  r[words - 1] = 0;  // the padding
  std::memcpy(r + kHeaderWords, encoded, encoded_bytes);
  return id;
}

std::pair<EntryId, bool> ObjectIndex::Insert(std::string_view name, uint64_t hash) {
  const EncodedName e(name);
  if (EntryId id = FindEncoded(e.bytes, e.size, e.flags, hash); id != kNoEntry) return {id, false};
  const EntryId id = Append(e.bytes, e.size, e.flags);
  if (id == kNoEntry) return {kNoEntry, false};
  live_++;
  if (10 * live_ > 7 * slots_.size()) ResizeSlots(2 * slots_.size());
  PlaceSlot(id, hash);
  if (loading_) {
    ordered_.push_back(id);
    return {id, true};
  }
  auto at = std::lower_bound(recent_.begin(), recent_.end(), id,
                             [this](EntryId a, EntryId b) { return Compare(a, b) < 0; });
  recent_.insert(at, id);
  if (recent_.size() >= std::clamp<size_t>(ordered_.size() / 64, 256, 8192)) MergeRecent();
  return {id, true};
}

void ObjectIndex::Erase(EntryId id) {
  Unlink(id);
  EraseSlot(id);
  if ((Flags(id) & kPinned) != 0) pins_.erase(id);
  SetFlag(id, kDead, true);
  live_--;
  dead_in_order_++;
  garbage_words_ += RecordWords(id);
  MaybeCompact();
}

// ---- recency --------------------------------------------------------------------------------

void ObjectIndex::Link(EntryId id) {
  Links& list = lists_[ListOf(id)];
  uint64_t* r = Record(id);
  r[2] = uint64_t{list.head} << 32;  // prev: none; next: the old head
  if (list.head != kNoEntry) {
    uint64_t& h = Record(list.head)[2];
    h = (h & 0xffffffff00000000u) | id;
  } else {
    list.tail = id;
  }
  list.head = id;
}

bool ObjectIndex::IsLinked(EntryId id) const {
  return Record(id)[2] != 0 || lists_[ListOf(id)].head == id;
}

void ObjectIndex::Unlink(EntryId id) {
  if (!IsLinked(id)) return;
  Links& list = lists_[ListOf(id)];
  const uint64_t links = Record(id)[2];
  const auto prev = static_cast<EntryId>(links);
  const auto next = static_cast<EntryId>(links >> 32);
  if (prev != kNoEntry) {
    uint64_t& p = Record(prev)[2];
    p = (p & 0xffffffffu) | uint64_t{next} << 32;
  } else {
    list.head = next;
  }
  if (next != kNoEntry) {
    uint64_t& n = Record(next)[2];
    n = (n & 0xffffffff00000000u) | prev;
  } else {
    list.tail = prev;
  }
  Record(id)[2] = 0;
}

void ObjectIndex::Touch(EntryId id, uint64_t stamp) {
  Unlink(id);
  set_stamp(id, stamp);
  Link(id);
}

// ---- name order -----------------------------------------------------------------------------

void ObjectIndex::MergeRecent() {
  if (recent_.empty() && dead_in_order_ == 0) return;
  std::vector<EntryId> merged;
  merged.reserve(live_);
  auto live = [this](EntryId id) { return (Flags(id) & kDead) == 0; };
  auto a = ordered_.begin();
  auto b = recent_.begin();
  while (a != ordered_.end() || b != recent_.end()) {
    const bool take_a = b == recent_.end() || (a != ordered_.end() && Compare(*a, *b) <= 0);
    const EntryId id = take_a ? *a++ : *b++;
    if (live(id)) merged.push_back(id);
  }
  ordered_ = std::move(merged);
  recent_ = {};
  dead_in_order_ = 0;
}

void ObjectIndex::CollectListCandidates(const ListOptions& options, std::vector<ObjectInfo>* out) {
  const bool after = options.start_after >= options.prefix;
  const std::string& from = after ? options.start_after : options.prefix;
  // The first entry at or past `from` (past it for start_after) in a table.
  auto first = [&](const std::vector<EntryId>& table) {
    return std::partition_point(table.begin(), table.end(), [&](EntryId id) {
      const int c = Compare(id, from);
      return after ? c <= 0 : c < 0;
    });
  };
  auto a = first(ordered_);
  auto b = first(recent_);
  char buf[kMaxKeyBytes];
  for (size_t n = 0; n <= options.max_keys && (a != ordered_.end() || b != recent_.end());) {
    const bool take_a = b == recent_.end() || (a != ordered_.end() && Compare(*a, *b) <= 0);
    const EntryId id = take_a ? *a++ : *b++;
    if ((Flags(id) & kDead) != 0) continue;
    const std::string_view name = NameInto(id, buf);
    if (!name.starts_with(options.prefix)) break;
    out->push_back({std::string(name), size(id)});
    n++;
  }
}

// ---- loading --------------------------------------------------------------------------------

void ObjectIndex::BeginLoading(size_t expected) {
  loading_ = true;
  size_t capacity = slots_.size();
  while (10 * (live_ + expected) > 7 * capacity) capacity *= 2;
  if (capacity != slots_.size()) ResizeSlots(capacity);
  ordered_.reserve(ordered_.size() + expected);
}

void ObjectIndex::set_stamp(EntryId id, uint64_t stamp) {
  uint64_t& w = Record(id)[1];
  w = (w & ~kStampMask) | (stamp & kStampMask);
}

void ObjectIndex::FinishLoading() {
  loading_ = false;
  auto by_name = [this](EntryId a, EntryId b) { return Compare(a, b) < 0; };
  if (!std::is_sorted(ordered_.begin(), ordered_.end(), by_name)) {
    std::sort(ordered_.begin(), ordered_.end(), by_name);
  }
  std::vector<EntryId> by_stamp;
  by_stamp.reserve(ordered_.size());
  for (EntryId id : ordered_) {
    if ((Flags(id) & kDead) == 0 && !IsLinked(id)) {
      by_stamp.push_back(id);
    }
  }
  std::stable_sort(by_stamp.begin(), by_stamp.end(),
                   [this](EntryId a, EntryId b) { return stamp(a) < stamp(b); });
  for (EntryId id : by_stamp) Link(id);
}

// ---- compaction -----------------------------------------------------------------------------

void ObjectIndex::MaybeCompact() {
  constexpr size_t kBlockWords = size_t{1} << kBlockWordsLog2;
  if (garbage_words_ > kBlockWords && 4 * garbage_words_ > used_words_) Compact();
}

void ObjectIndex::Compact() {
  MergeRecent();  // ordered_ now holds exactly the live entries
  ObjectIndex fresh;
  fresh.ordered_.reserve(ordered_.size());
  // Copy each record, then leave its new id where its links were (its copy keeps them).
  for (EntryId& id : ordered_) {
    uint64_t* r = Record(id);
    const size_t encoded = r[0] >> kSizeBits;
    const EntryId moved =
        fresh.Append(reinterpret_cast<const uint8_t*>(r + kHeaderWords), encoded, 0);
    uint64_t* m = fresh.Record(moved);
    m[0] = r[0];
    m[1] = r[1];
    m[2] = r[2];
    r[2] = moved;
    fresh.ordered_.push_back(moved);
    id = moved;
  }
  auto forward = [this](EntryId old) {
    return old == kNoEntry ? kNoEntry : static_cast<EntryId>(Record(old)[2]);
  };
  for (EntryId id : fresh.ordered_) {
    uint64_t& links = fresh.Record(id)[2];
    links = forward(static_cast<EntryId>(links)) |
            uint64_t{forward(static_cast<EntryId>(links >> 32))} << 32;
  }
  for (Links& list : lists_) list = {forward(list.head), forward(list.tail)};
  for (uint32_t& s : slots_) {
    if (s != 0) s = (s & ~kIdMask) | forward(s & kIdMask);
  }
  std::unordered_map<EntryId, int64_t> pins;
  for (const auto& [id, until] : pins_) pins.emplace(forward(id), until);
  pins_ = std::move(pins);
  blocks_ = std::move(fresh.blocks_);
  used_words_ = fresh.used_words_;
  garbage_words_ = fresh.garbage_words_;
  ordered_ = std::move(fresh.ordered_);
}

size_t ObjectIndex::MemoryBytes() const {
  return blocks_.size() * (size_t{8} << kBlockWordsLog2) + slots_.capacity() * 4 +
         (ordered_.capacity() + recent_.capacity()) * sizeof(EntryId) +
         pins_.size() * (sizeof(EntryId) + sizeof(int64_t) + 2 * sizeof(void*));
}

}  // namespace objectcache::local
