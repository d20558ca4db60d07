#include "nvmekv/spec.h"

#include <cstring>

#include "core/hex.h"

namespace objectcache::nvmekv {
namespace {

void PutLe(std::span<uint8_t> out, size_t at, uint64_t v, int n) {
  for (int i = 0; i < n; ++i) out[at + static_cast<size_t>(i)] = static_cast<uint8_t>(v >> (8 * i));
}
uint64_t GetLe(std::span<const uint8_t> in, size_t at, int n) {
  uint64_t v = 0;
  for (int i = 0; i < n; ++i) v |= uint64_t{in[at + static_cast<size_t>(i)]} << (8 * i);
  return v;
}
void PutAscii(std::span<uint8_t> out, size_t at, size_t width, std::string_view s) {
  for (size_t i = 0; i < width; ++i) out[at + i] = i < s.size() ? static_cast<uint8_t>(s[i]) : ' ';
}
std::string GetAscii(std::span<const uint8_t> in, size_t at, size_t width) {
  std::string s(reinterpret_cast<const char*>(in.data() + at), width);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\0')) s.pop_back();
  return s;
}

SubmissionEntry AdminCommand(uint8_t opcode, uint32_t cdw10, uint32_t cdw11 = 0) {
  SubmissionEntry e;
  e.dw[0] = opcode;
  e.dw[10] = cdw10;
  e.dw[11] = cdw11;
  return e;
}

SubmissionEntry KeyCommand(uint8_t opcode, const Key& key) {
  SubmissionEntry e;
  e.dw[0] = opcode;
  e.dw[1] = kNamespaceId;
  SetKey(e, key);
  return e;
}

// A key command that moves data: its buffer and the buffer's size (value size, dword 10).
SubmissionEntry DataCommand(uint8_t opcode, const Key& key, uint64_t data, uint32_t size) {
  SubmissionEntry e = KeyCommand(opcode, key);
  e.set_data_pointer(data);
  e.dw[10] = size;
  return e;
}

}  // namespace

uint32_t CompletionDw3(uint16_t command_id, bool phase, CompletionStatus status) {
  // Every error is final for this command: DNR set on failure.
  uint32_t dnr = status.ok() ? 0 : 1u << 31;
  return command_id | (uint32_t{phase} << 16) | (uint32_t{status.code} << 17) |
         (uint32_t{status.type & 0x7u} << 25) | dnr;
}

bool IsKeyValueStatus(CompletionStatus s, uint8_t code) {
  return (s.type == 0 || s.type == 1) && s.code == code;
}

std::string DescribeStatus(CompletionStatus s) {
  const char* name = "unknown status";
  if (s.type == 0 || (s.type == 1 && s.code >= 0x80)) {
    switch (s.code) {
      case sc::kSuccess:
        name = "Successful Completion";
        break;
      case sc::kInvalidOpcode:
        name = "Invalid Command Opcode";
        break;
      case sc::kInvalidField:
        name = "Invalid Field in Command";
        break;
      case sc::kDataTransferError:
        name = "Data Transfer Error";
        break;
      case sc::kInternalError:
        name = "Internal Error";
        break;
      case sc::kAbortedSqDeletion:
        name = "Command Aborted due to SQ Deletion";
        break;
      case sc::kInvalidNamespace:
        name = "Invalid Namespace or Format";
        break;
      case sc::kCapacityExceeded:
        name = "Capacity Exceeded";
        break;
      case sc::kInvalidValueSize:
        name = "Invalid Value Size";
        break;
      case sc::kInvalidKeySize:
        name = "Invalid Key Size";
        break;
      case sc::kKeyDoesNotExist:
        name = "Key Does Not Exist";
        break;
      case sc::kUnrecoveredError:
        name = "Unrecovered Error";
        break;
      case sc::kKeyExists:
        name = "Key Exists";
        break;
      default:
        break;
    }
  } else if (s.type == 1) {
    switch (s.code) {
      case sc::kCompletionQueueInvalid:
        name = "Completion Queue Invalid";
        break;
      case sc::kInvalidQueueIdentifier:
        name = "Invalid Queue Identifier";
        break;
      case sc::kInvalidQueueSize:
        name = "Invalid Queue Size";
        break;
      case sc::kInvalidQueueDeletion:
        name = "Invalid Queue Deletion";
        break;
      default:
        break;
    }
  }
  static constexpr char kHex[] = "0123456789ABCDEF";
  std::string out = std::string(name) + " (SCT " + std::to_string(s.type) + ", SC ";
  out += kHex[s.code >> 4];
  out += kHex[s.code & 0xf];
  return out + "h)";
}

std::optional<Key> Key::FromBytes(std::span<const uint8_t> b) {
  if (b.empty() || b.size() > kMaxKeyLength) return std::nullopt;
  Key k;
  std::memcpy(k.bytes.data(), b.data(), b.size());
  k.length = static_cast<uint8_t>(b.size());
  return k;
}

std::string Key::ToHex() const { return EncodeHex(bytes.data(), length); }

std::optional<Key> Key::FromHex(std::string_view hex) {
  // Lowercase only: a key has one name, the one ToHex gives (a store object named in capitals
  // is not a key's).
  if (hex.empty() || hex.size() > 2 * kMaxKeyLength ||
      std::ranges::any_of(hex, [](char c) { return c >= 'A' && c <= 'F'; })) {
    return std::nullopt;
  }
  Key k;
  if (!DecodeHex(hex, k.bytes.data())) return std::nullopt;
  k.length = static_cast<uint8_t>(hex.size() / 2);
  return k;
}

void SetKey(SubmissionEntry& e, const Key& key) {
  std::array<uint8_t, kMaxKeyLength> b{};
  std::memcpy(b.data(), key.bytes.data(), key.length);
  std::array<uint32_t, 4> w{};
  for (size_t i = 0; i < kMaxKeyLength; ++i) w[i / 4] |= uint32_t{b[i]} << (8 * (i % 4));
  e.dw[2] = w[0];
  e.dw[3] = w[1];
  e.dw[14] = w[2];
  e.dw[15] = w[3];
  e.dw[11] = (e.dw[11] & ~0xffu) | key.length;
}

uint8_t KeyLength(const SubmissionEntry& e) { return static_cast<uint8_t>(e.dw[11] & 0xff); }

Key KeyOf(const SubmissionEntry& e) {
  Key k;
  const uint32_t w[4] = {e.dw[2], e.dw[3], e.dw[14], e.dw[15]};
  for (size_t i = 0; i < kMaxKeyLength; ++i)
    k.bytes[i] = static_cast<uint8_t>(w[i / 4] >> (8 * (i % 4)));
  k.length = static_cast<uint8_t>(std::min<size_t>(KeyLength(e), kMaxKeyLength));
  for (size_t i = k.length; i < kMaxKeyLength; ++i) k.bytes[i] = 0;
  return k;
}

SubmissionEntry StoreCommand(const Key& key, uint64_t data, uint32_t value_size, uint8_t options) {
  SubmissionEntry e = DataCommand(kv::kStore, key, data, value_size);
  e.dw[11] |= uint32_t{options} << 8;
  return e;
}

SubmissionEntry RetrieveCommand(const Key& key, uint64_t data, uint32_t buffer_size) {
  return DataCommand(kv::kRetrieve, key, data, buffer_size);
}

SubmissionEntry RetrieveRangeCommand(const Key& key, uint64_t data, uint32_t buffer_size,
                                     uint64_t offset) {
  SubmissionEntry e = DataCommand(kv::kRetrieveRange, key, data, buffer_size);
  e.dw[12] = static_cast<uint32_t>(offset);
  e.dw[13] = static_cast<uint32_t>(offset >> 32);
  return e;
}

SubmissionEntry ListCommand(const Key& start, uint64_t data, uint32_t buffer_size) {
  return DataCommand(kv::kList, start, data, buffer_size);
}

SubmissionEntry DeleteCommand(const Key& key) { return KeyCommand(kv::kDelete, key); }
SubmissionEntry ExistCommand(const Key& key) { return KeyCommand(kv::kExist, key); }

SubmissionEntry IdentifyCommand(uint8_t cns, uint32_t nsid, uint8_t csi, uint64_t data) {
  SubmissionEntry e;
  e.dw[0] = admin::kIdentify;
  e.dw[1] = nsid;
  e.set_data_pointer(data);
  e.dw[10] = cns;
  e.dw[11] = uint32_t{csi} << 24;
  return e;
}

SubmissionEntry CreateIoCqCommand(uint16_t qid, uint16_t entries, uint64_t base) {
  SubmissionEntry e;
  e.dw[0] = admin::kCreateIoCq;
  e.set_data_pointer(base);
  e.dw[10] = (uint32_t{static_cast<uint16_t>(entries - 1)} << 16) | qid;
  e.dw[11] = 1;  // physically contiguous, no interrupts
  return e;
}

SubmissionEntry CreateIoSqCommand(uint16_t qid, uint16_t entries, uint64_t base, uint16_t cqid) {
  SubmissionEntry e;
  e.dw[0] = admin::kCreateIoSq;
  e.set_data_pointer(base);
  e.dw[10] = (uint32_t{static_cast<uint16_t>(entries - 1)} << 16) | qid;
  e.dw[11] = (uint32_t{cqid} << 16) | 1;
  return e;
}

SubmissionEntry DeleteIoSqCommand(uint16_t qid) { return AdminCommand(admin::kDeleteIoSq, qid); }
SubmissionEntry DeleteIoCqCommand(uint16_t qid) { return AdminCommand(admin::kDeleteIoCq, qid); }
SubmissionEntry SetFeaturesCommand(uint8_t fid, uint32_t cdw11) {
  return AdminCommand(admin::kSetFeatures, fid, cdw11);
}
SubmissionEntry GetFeaturesCommand(uint8_t fid) { return AdminCommand(admin::kGetFeatures, fid); }

size_t EncodeKeyList(std::span<const Key> keys, std::span<uint8_t> buffer) {
  if (buffer.size() < 4) return 0;
  size_t at = 4, n = 0;
  for (const Key& k : keys) {
    size_t need = (2 + size_t{k.length} + 3) / 4 * 4;
    if (buffer.size() - at < need) break;
    PutLe(buffer, at, k.length, 2);
    std::memcpy(buffer.data() + at + 2, k.bytes.data(), k.length);
    std::memset(buffer.data() + at + 2 + k.length, 0, need - 2 - k.length);
    at += need;
    ++n;
  }
  PutLe(buffer, 0, n, 4);
  return n;
}

std::optional<std::vector<Key>> DecodeKeyList(std::span<const uint8_t> buffer) {
  if (buffer.size() < 4) return std::nullopt;
  uint64_t count = GetLe(buffer, 0, 4);
  std::vector<Key> keys;
  size_t at = 4;
  for (uint64_t i = 0; i < count; ++i) {
    if (buffer.size() - at < 2) return std::nullopt;
    size_t len = GetLe(buffer, at, 2);
    size_t need = (2 + len + 3) / 4 * 4;
    if (len == 0 || len > kMaxKeyLength || buffer.size() - at < need) return std::nullopt;
    keys.push_back(*Key::FromBytes(buffer.subspan(at + 2, len)));
    at += need;
  }
  return keys;
}

void EncodeControllerIdentity(const ControllerIdentity& id,
                              std::span<uint8_t, kIdentifyBytes> out) {
  std::memset(out.data(), 0, out.size());
  PutAscii(out, 4, 20, id.serial);
  PutAscii(out, 24, 40, id.model);
  PutAscii(out, 64, 8, id.firmware);
  out[77] = id.mdts;
  PutLe(out, 80, id.version, 4);
  out[512] = 0x66;  // SQES: 64-byte entries, required and largest
  out[513] = 0x44;  // CQES: 16-byte entries
  PutLe(out, 514, id.maxcmd, 2);
  PutLe(out, 516, id.namespaces, 4);
}

ControllerIdentity DecodeControllerIdentity(std::span<const uint8_t, kIdentifyBytes> in) {
  ControllerIdentity id;
  id.serial = GetAscii(in, 4, 20);
  id.model = GetAscii(in, 24, 40);
  id.firmware = GetAscii(in, 64, 8);
  id.mdts = in[77];
  id.version = static_cast<uint32_t>(GetLe(in, 80, 4));
  id.maxcmd = static_cast<uint16_t>(GetLe(in, 514, 2));
  id.namespaces = static_cast<uint32_t>(GetLe(in, 516, 4));
  return id;
}

void EncodeKeyValueNamespace(const KeyValueNamespace& ns, std::span<uint8_t, kIdentifyBytes> out) {
  std::memset(out.data(), 0, out.size());
  PutLe(out, 0, ns.size_bytes, 8);
  PutLe(out, 16, ns.used_bytes, 8);
  out[25] = 1;  // NKVF: one KV format
  PutLe(out, 72, ns.max_key_length, 2);
  PutLe(out, 76, ns.max_value_length, 4);
  PutLe(out, 80, ns.max_keys, 4);
}

std::optional<KeyValueNamespace> DecodeKeyValueNamespace(
    std::span<const uint8_t, kIdentifyBytes> in) {
  if (in[25] == 0) return std::nullopt;
  KeyValueNamespace ns;
  ns.size_bytes = GetLe(in, 0, 8);
  ns.used_bytes = GetLe(in, 16, 8);
  ns.max_key_length = static_cast<uint16_t>(GetLe(in, 72, 2));
  ns.max_value_length = static_cast<uint32_t>(GetLe(in, 76, 4));
  ns.max_keys = static_cast<uint32_t>(GetLe(in, 80, 4));
  return ns;
}

}  // namespace objectcache::nvmekv
