// The parts of NVM Express that the key-value controller and its initiators speak: queue entry
// formats, the register page, admin commands, and the Key Value Command Set 1.0 (command set
// identifier 01h). Field positions are the specifications'; docs/nvme-kv.md lists them with the
// one vendor-specific command (Retrieve Range) and what this controller does not implement.
//
// Entries are plain arrays of little-endian dwords, the same bytes on the host, the controller
// and a GPU. Builders and accessors here are pure functions: no state, thread-safe.
#pragma once

#include <algorithm>
#include <array>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace objectcache::nvmekv {

inline constexpr size_t kSubmissionEntryBytes = 64;
inline constexpr size_t kCompletionEntryBytes = 16;
inline constexpr size_t kPageBytes = 4096;   // CC.MPS = 0: the only memory page size
inline constexpr uint32_t kNamespaceId = 1;  // the one namespace
inline constexpr uint8_t kCommandSetKeyValue = 0x01;
inline constexpr size_t kMaxKeyLength = 16;

// A submission queue entry: CDW0 (opcode 7:0, command id 31:16), NSID in CDW1, the key in
// CDW2-3 and CDW14-15, the data pointer (PRP1) in CDW6-7, command dwords 10-15.
struct SubmissionEntry {
  std::array<uint32_t, 16> dw{};

  uint8_t opcode() const { return static_cast<uint8_t>(dw[0] & 0xff); }
  uint16_t command_id() const { return static_cast<uint16_t>(dw[0] >> 16); }
  void set_command_id(uint16_t cid) { dw[0] = (dw[0] & 0xffff) | (uint32_t{cid} << 16); }
  uint32_t nsid() const { return dw[1]; }
  // PRP1: an offset into the shared memory's data region (queue region for queue bases).
  uint64_t data_pointer() const { return dw[6] | (uint64_t{dw[7]} << 32); }
  void set_data_pointer(uint64_t offset) {
    dw[6] = static_cast<uint32_t>(offset);
    dw[7] = static_cast<uint32_t>(offset >> 32);
  }
};
static_assert(sizeof(SubmissionEntry) == kSubmissionEntryBytes);

// The status field of a completion (DW3 bits 31:17): status code type and status code.
struct CompletionStatus {
  uint8_t type = 0;  // SCT: 0 generic, 1 command specific
  uint8_t code = 0;  // SC
  bool ok() const { return type == 0 && code == 0; }
  friend bool operator==(const CompletionStatus&, const CompletionStatus&) = default;
};

// A completion queue entry: DW0-1 command specific, DW2 = SQ head (15:0) and SQ id (31:16),
// DW3 = command id (15:0), phase tag (16), status code (24:17), type (27:25), DNR (31).
struct CompletionEntry {
  std::array<uint32_t, 4> dw{};

  uint16_t sq_head() const { return static_cast<uint16_t>(dw[2] & 0xffff); }
  uint16_t sq_id() const { return static_cast<uint16_t>(dw[2] >> 16); }
  uint16_t command_id() const { return static_cast<uint16_t>(dw[3] & 0xffff); }
  bool phase() const { return (dw[3] >> 16) & 1; }
  CompletionStatus status() const {
    return {static_cast<uint8_t>((dw[3] >> 25) & 0x7), static_cast<uint8_t>((dw[3] >> 17) & 0xff)};
  }
  bool do_not_retry() const { return (dw[3] >> 31) & 1; }
};
static_assert(sizeof(CompletionEntry) == kCompletionEntryBytes);

// DW3 of a completion: what the controller writes last (with release), the phase tag in it.
uint32_t CompletionDw3(uint16_t command_id, bool phase, CompletionStatus status);

// Status codes. Generic (SCT 0): the base specification's, and the Key Value Command Set's in
// the I/O-command-set-specific range 80h-BFh. An initiator accepts the key-value codes under
// SCT 0 or SCT 1 (xNVMe expects 1); this controller sends them under 0, as the spec lists them.
namespace sc {
inline constexpr uint8_t kSuccess = 0x00;
inline constexpr uint8_t kInvalidOpcode = 0x01;
inline constexpr uint8_t kInvalidField = 0x02;
inline constexpr uint8_t kDataTransferError = 0x04;
inline constexpr uint8_t kInternalError = 0x06;
inline constexpr uint8_t kAbortedSqDeletion = 0x08;
inline constexpr uint8_t kInvalidNamespace = 0x0B;
inline constexpr uint8_t kCapacityExceeded = 0x81;
inline constexpr uint8_t kInvalidValueSize = 0x85;
inline constexpr uint8_t kInvalidKeySize = 0x86;
inline constexpr uint8_t kKeyDoesNotExist = 0x87;
inline constexpr uint8_t kUnrecoveredError = 0x88;
inline constexpr uint8_t kKeyExists = 0x89;
// Command specific (SCT 1), admin queue commands.
inline constexpr uint8_t kCompletionQueueInvalid = 0x00;
inline constexpr uint8_t kInvalidQueueIdentifier = 0x01;
inline constexpr uint8_t kInvalidQueueSize = 0x02;
inline constexpr uint8_t kInvalidQueueDeletion = 0x0C;
}  // namespace sc
inline constexpr CompletionStatus Generic(uint8_t code) { return {0, code}; }
inline constexpr CompletionStatus CommandSpecific(uint8_t code) { return {1, code}; }
// True for a key-value status `code` under either type (see above).
bool IsKeyValueStatus(CompletionStatus s, uint8_t code);
// "Key Does Not Exist (SCT 0, SC 87h)".
std::string DescribeStatus(CompletionStatus s);

// Admin opcodes.
namespace admin {
inline constexpr uint8_t kDeleteIoSq = 0x00;
inline constexpr uint8_t kCreateIoSq = 0x01;
inline constexpr uint8_t kDeleteIoCq = 0x04;
inline constexpr uint8_t kCreateIoCq = 0x05;
inline constexpr uint8_t kIdentify = 0x06;
inline constexpr uint8_t kSetFeatures = 0x09;
inline constexpr uint8_t kGetFeatures = 0x0A;
// Identify CNS values.
inline constexpr uint8_t kCnsNamespace = 0x00;
inline constexpr uint8_t kCnsController = 0x01;
inline constexpr uint8_t kCnsActiveNamespaces = 0x02;
inline constexpr uint8_t kCnsCommandSetNamespace = 0x05;  // with CSI in CDW11 31:24
// Feature identifiers.
inline constexpr uint8_t kFeatureNumberOfQueues = 0x07;
inline constexpr uint8_t kFeatureKeyValueConfig =
    0x20;  // CDW11 bit 0: delete of a missing key fails
}  // namespace admin

// Key Value Command Set opcodes (bits 1:0 give the transfer direction), and the vendor-specific
// Retrieve Range (80h-FFh are vendor specific; 10b = controller to host).
namespace kv {
inline constexpr uint8_t kStore = 0x01;
inline constexpr uint8_t kRetrieve = 0x02;
inline constexpr uint8_t kList = 0x06;
inline constexpr uint8_t kDelete = 0x10;
inline constexpr uint8_t kExist = 0x14;
inline constexpr uint8_t kRetrieveRange = 0x82;
// Store options, CDW11 bits 15:8.
inline constexpr uint8_t kStoreUpdateOnly = 0x01;  // store only if the key exists, else 87h
inline constexpr uint8_t kStoreCreateOnly = 0x02;  // store only if it does not, else 89h
inline constexpr uint8_t kStoreNoCompress = 0x04;
}  // namespace kv

// A key of 1 to 16 bytes. Keys of different lengths are different keys.
struct Key {
  std::array<uint8_t, kMaxKeyLength> bytes{};
  uint8_t length = 0;

  static std::optional<Key> FromBytes(std::span<const uint8_t> b);
  std::span<const uint8_t> view() const { return {bytes.data(), length}; }
  std::string ToHex() const;
  // Inverse of ToHex: 2 to 32 lowercase hex digits, an even number of them.
  static std::optional<Key> FromHex(std::string_view hex);
  friend bool operator==(const Key& a, const Key& b) {
    return a.length == b.length && std::ranges::equal(a.view(), b.view());
  }
};

// The key of a key-value command: bytes 7:0 in CDW2-3, 15:8 in CDW14-15, length in CDW11 7:0.
// The length is not checked here (the controller answers a bad one).
void SetKey(SubmissionEntry& e, const Key& key);
uint8_t KeyLength(const SubmissionEntry& e);
Key KeyOf(const SubmissionEntry& e);  // the first min(KeyLength, 16) bytes

// Builders for the key-value commands. `data` is the data pointer (an offset into the data
// region); sizes are bytes. The command id is set at submission.
SubmissionEntry StoreCommand(const Key& key, uint64_t data, uint32_t value_size,
                             uint8_t options = 0);
SubmissionEntry RetrieveCommand(const Key& key, uint64_t data, uint32_t buffer_size);
// Retrieve Range (vendor specific 82h): `buffer_size` bytes of the value from byte `offset`
// (CDW12-13). DW0 of the completion is the whole value's size, DW1 the bytes transferred.
SubmissionEntry RetrieveRangeCommand(const Key& key, uint64_t data, uint32_t buffer_size,
                                     uint64_t offset);
SubmissionEntry ListCommand(const Key& start, uint64_t data, uint32_t buffer_size);
SubmissionEntry DeleteCommand(const Key& key);
SubmissionEntry ExistCommand(const Key& key);

// Builders for the admin commands this controller implements.
SubmissionEntry IdentifyCommand(uint8_t cns, uint32_t nsid, uint8_t csi, uint64_t data);
SubmissionEntry CreateIoCqCommand(uint16_t qid, uint16_t entries, uint64_t base);
SubmissionEntry CreateIoSqCommand(uint16_t qid, uint16_t entries, uint64_t base, uint16_t cqid);
SubmissionEntry DeleteIoSqCommand(uint16_t qid);
SubmissionEntry DeleteIoCqCommand(uint16_t qid);
SubmissionEntry SetFeaturesCommand(uint8_t fid, uint32_t cdw11);
SubmissionEntry GetFeaturesCommand(uint8_t fid);

// The List command's buffer: a u32 count of keys, then per key a u16 length, its bytes, and
// padding to a 4-byte boundary; only whole keys that fit. Encode returns the keys written.
size_t EncodeKeyList(std::span<const Key> keys, std::span<uint8_t> buffer);
// Nullopt when the buffer is malformed (a count or a length that runs past its end, or > 16).
std::optional<std::vector<Key>> DecodeKeyList(std::span<const uint8_t> buffer);

// Identify data structures (4096 bytes each), the fields this controller fills.
inline constexpr size_t kIdentifyBytes = 4096;
struct ControllerIdentity {
  std::string serial;       // SN, bytes 4-23, ASCII padded with spaces
  std::string model;        // MN, bytes 24-63
  std::string firmware;     // FR, bytes 64-71
  uint8_t mdts = 0;         // byte 77: largest transfer 2^MDTS pages (0: no limit)
  uint32_t version = 0;     // VER, bytes 80-83
  uint16_t maxcmd = 0;      // bytes 514-515
  uint32_t namespaces = 0;  // NN, bytes 516-519
};
void EncodeControllerIdentity(const ControllerIdentity& id, std::span<uint8_t, kIdentifyBytes> out);
ControllerIdentity DecodeControllerIdentity(std::span<const uint8_t, kIdentifyBytes> in);

// The Key Value Command Set's Identify Namespace (CNS 05h, CSI 01h): NSZE and NUSE in bytes
// (bytes 0-7, 16-23), the number of KV formats (byte 25) and the formats from byte 72, 16 bytes
// each: max key length (u16), options (byte 3), max value length (u32 at 4), max keys (u32 at 8).
struct KeyValueNamespace {
  uint64_t size_bytes = 0;  // NSZE: the capacity; 0 when the store has no bound
  uint64_t used_bytes = 0;  // NUSE
  uint16_t max_key_length = kMaxKeyLength;
  uint32_t max_value_length = 0;
  uint32_t max_keys = 0;  // 0xFFFFFFFF: no limit
};
void EncodeKeyValueNamespace(const KeyValueNamespace& ns, std::span<uint8_t, kIdentifyBytes> out);
std::optional<KeyValueNamespace> DecodeKeyValueNamespace(
    std::span<const uint8_t, kIdentifyBytes> in);

// The register page (BAR0). Offsets in bytes.
namespace reg {
inline constexpr size_t kCap = 0x00;   // u64
inline constexpr size_t kVs = 0x08;    // u32
inline constexpr size_t kCc = 0x14;    // u32
inline constexpr size_t kCsts = 0x1C;  // u32
inline constexpr size_t kAqa = 0x24;   // u32: ASQS 11:0, ACQS 27:16 (zero based)
inline constexpr size_t kAsq = 0x28;   // u64
inline constexpr size_t kAcq = 0x30;   // u64
// Not NVMe: where this controller describes its shared memory (docs/nvme-kv.md).
inline constexpr size_t kSharedMap = 0xE00;
inline constexpr size_t kDoorbells = 0x1000;
// CAP fields.
inline constexpr uint64_t kCapContiguousQueues = uint64_t{1} << 16;  // CQR
inline constexpr int kCapTimeoutShift = 24;                          // TO, 500 ms units
inline constexpr int kCapDstrdShift = 32;
inline constexpr uint64_t kCapIoCommandSets = uint64_t{1} << 43;  // CSS bit 6
// CC fields.
inline constexpr uint32_t kCcEnable = 1;
inline constexpr int kCcCssShift = 4;   // 110b: all supported I/O command sets
inline constexpr int kCcShnShift = 14;  // 01b normal shutdown
inline constexpr int kCcIosqesShift = 16;
inline constexpr int kCcIocqesShift = 20;
// CSTS fields.
inline constexpr uint32_t kCstsReady = 1;
inline constexpr uint32_t kCstsFatal = 2;
inline constexpr uint32_t kCstsShutdownComplete = 2u << 2;
inline constexpr uint32_t kCstsShutdownMask = 3u << 2;
}  // namespace reg

// Doorbell offsets for queue `qid` at a doorbell stride of 4 << dstrd bytes.
constexpr size_t SqTailDoorbell(uint16_t qid, uint32_t dstrd) {
  return reg::kDoorbells + (2 * size_t{qid}) * (size_t{4} << dstrd);
}
constexpr size_t CqHeadDoorbell(uint16_t qid, uint32_t dstrd) {
  return reg::kDoorbells + (2 * size_t{qid} + 1) * (size_t{4} << dstrd);
}

}  // namespace objectcache::nvmekv
