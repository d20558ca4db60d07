// Command and data-structure encodings against byte vectors written from the specifications'
// tables (NVMe base 2.0: SQE, CQE, registers; Key Value Command Set 1.0: Store, Retrieve, List,
// Delete, Exist, Identify Namespace).
#include "nvmekv/spec.h"

#include <gtest/gtest.h>

#include <cstring>

namespace objectcache::nvmekv {
namespace {

std::array<uint8_t, 64> Bytes(const SubmissionEntry& e) {
  std::array<uint8_t, 64> b{};
  std::memcpy(b.data(), &e, 64);
  return b;
}

Key K(std::string_view s) {
  return *Key::FromBytes(std::span(reinterpret_cast<const uint8_t*>(s.data()), s.size()));
}

TEST(NvmeKvSpecTest, StoreEncodesKeyValueSizeAndOptions) {
  // Key "0123456789ABCDEF": bytes 7:0 in CDW2-3 (bytes 8..15 of the entry), 15:8 in CDW14-15
  // (bytes 56..63); KL in CDW11 7:0 (byte 44), options in CDW11 15:8 (byte 45); value size in
  // CDW10 (bytes 40..43); PRP1 in CDW6-7 (bytes 24..31); NSID in CDW1 (bytes 4..7).
  SubmissionEntry e =
      StoreCommand(K("0123456789ABCDEF"), 0x1122334455667788, 0x00010000, kv::kStoreCreateOnly);
  e.set_command_id(0xBEEF);
  std::array<uint8_t, 64> want{};
  want[0] = 0x01;  // opcode Store
  want[2] = 0xEF;  // CID 15:0 in CDW0 31:16
  want[3] = 0xBE;
  want[4] = 0x01;  // NSID 1
  const char* key = "0123456789ABCDEF";
  for (int i = 0; i < 8; ++i) want[8 + i] = static_cast<uint8_t>(key[i]);
  for (int i = 0; i < 8; ++i) want[56 + i] = static_cast<uint8_t>(key[8 + i]);
  const uint8_t prp[8] = {0x88, 0x77, 0x66, 0x55, 0x44, 0x33, 0x22, 0x11};
  std::memcpy(&want[24], prp, 8);
  want[40] = 0x00;
  want[41] = 0x00;
  want[42] = 0x01;  // 0x00010000 little endian
  want[44] = 16;    // KL
  want[45] = 0x02;  // bit 9: store only if the key does not exist
  EXPECT_EQ(Bytes(e), want);
  EXPECT_EQ(e.command_id(), 0xBEEF);
  EXPECT_EQ(e.data_pointer(), 0x1122334455667788u);
  EXPECT_EQ(KeyOf(e), K("0123456789ABCDEF"));
}

TEST(NvmeKvSpecTest, RetrieveListDeleteExistOpcodesAndFields) {
  SubmissionEntry r = RetrieveCommand(K("ab"), 4096, 512);
  EXPECT_EQ(Bytes(r)[0], 0x02);
  EXPECT_EQ(Bytes(r)[8], 'a');
  EXPECT_EQ(Bytes(r)[9], 'b');
  EXPECT_EQ(Bytes(r)[10], 0);  // bytes past the key length are zero
  EXPECT_EQ(Bytes(r)[44], 2);
  EXPECT_EQ(r.dw[10], 512u);  // host buffer size
  EXPECT_EQ(Bytes(ListCommand(K("a"), 0, 4096))[0], 0x06);
  EXPECT_EQ(Bytes(DeleteCommand(K("a")))[0], 0x10);
  EXPECT_EQ(Bytes(ExistCommand(K("a")))[0], 0x14);
  // Transfer direction in opcode bits 1:0: Store host to controller, Retrieve and List (and
  // the vendor Retrieve Range) controller to host, Delete and Exist none.
  EXPECT_EQ(kv::kStore & 3, 1);
  EXPECT_EQ(kv::kRetrieve & 3, 2);
  EXPECT_EQ(kv::kList & 3, 2);
  EXPECT_EQ(kv::kRetrieveRange & 3, 2);
  EXPECT_GE(kv::kRetrieveRange, 0x80);  // vendor specific
  EXPECT_EQ(kv::kDelete & 3, 0);
  EXPECT_EQ(kv::kExist & 3, 0);
  SubmissionEntry rr = RetrieveRangeCommand(K("a"), 0, 100, 0x0000000500000007);
  EXPECT_EQ(rr.dw[12], 7u);
  EXPECT_EQ(rr.dw[13], 5u);
}

TEST(NvmeKvSpecTest, AdminCommandFields) {
  // Create I/O CQ: CDW10 = QSIZE (zero based) 31:16 | QID; CDW11 bit 0 = physically contiguous.
  SubmissionEntry cq = CreateIoCqCommand(3, 1024, 0x5000);
  EXPECT_EQ(cq.opcode(), 0x05);
  EXPECT_EQ(cq.dw[10], (1023u << 16) | 3u);
  EXPECT_EQ(cq.dw[11], 1u);
  EXPECT_EQ(cq.data_pointer(), 0x5000u);
  // Create I/O SQ: CDW11 = CQID 31:16 | PC.
  SubmissionEntry sq = CreateIoSqCommand(3, 16, 0x9000, 2);
  EXPECT_EQ(sq.opcode(), 0x01);
  EXPECT_EQ(sq.dw[10], (15u << 16) | 3u);
  EXPECT_EQ(sq.dw[11], (2u << 16) | 1u);
  // Identify: CNS in CDW10 7:0, CSI in CDW11 31:24.
  SubmissionEntry id = IdentifyCommand(0x05, 1, 0x01, 0);
  EXPECT_EQ(id.opcode(), 0x06);
  EXPECT_EQ(id.dw[10], 5u);
  EXPECT_EQ(id.dw[11], 0x01000000u);
  EXPECT_EQ(SetFeaturesCommand(0x20, 1).dw[10], 0x20u);
  EXPECT_EQ(DeleteIoSqCommand(7).opcode(), 0x00);
  EXPECT_EQ(DeleteIoCqCommand(7).opcode(), 0x04);
}

TEST(NvmeKvSpecTest, CompletionEntryFields) {
  // DW3: CID 15:0, P 16, SC 24:17, SCT 27:25, DNR 31.
  uint32_t dw3 = CompletionDw3(0x1234, true, Generic(sc::kKeyDoesNotExist));
  EXPECT_EQ(dw3, 0x1234u | (1u << 16) | (0x87u << 17) | (1u << 31));
  CompletionEntry c;
  c.dw = {10, 0, (2u << 16) | 9u, dw3};
  EXPECT_EQ(c.command_id(), 0x1234);
  EXPECT_TRUE(c.phase());
  EXPECT_EQ(c.status(), Generic(sc::kKeyDoesNotExist));
  EXPECT_TRUE(c.do_not_retry());
  EXPECT_EQ(c.sq_head(), 9);
  EXPECT_EQ(c.sq_id(), 2);
  EXPECT_EQ(CompletionDw3(1, false, CommandSpecific(sc::kInvalidQueueSize)),
            1u | (0x02u << 17) | (1u << 25) | (1u << 31));
  EXPECT_EQ(CompletionDw3(1, true, {}), 1u | (1u << 16));
  // Either status code type is accepted for the key-value codes.
  EXPECT_TRUE(IsKeyValueStatus(CommandSpecific(0x87), sc::kKeyDoesNotExist));
  EXPECT_EQ(DescribeStatus(Generic(0x89)), "Key Exists (SCT 0, SC 89h)");
}

TEST(NvmeKvSpecTest, DoorbellOffsets) {
  // SQ y tail at 1000h + (2y)(4 << DSTRD), CQ y head at 1000h + (2y + 1)(4 << DSTRD).
  EXPECT_EQ(SqTailDoorbell(0, 0), 0x1000u);
  EXPECT_EQ(CqHeadDoorbell(0, 0), 0x1004u);
  EXPECT_EQ(SqTailDoorbell(1, 0), 0x1008u);
  EXPECT_EQ(SqTailDoorbell(1, 4), 0x1000u + 2 * 64);
  EXPECT_EQ(CqHeadDoorbell(1, 4), 0x1000u + 3 * 64);
}

TEST(NvmeKvSpecTest, KeyListFormat) {
  // u32 count, then per key u16 length, the key, padding to 4 bytes.
  std::vector<Key> keys = {K("a"), K("bcd"), K("0123456789abcdef")};
  std::array<uint8_t, 64> buf{};
  ASSERT_EQ(EncodeKeyList(keys, buf), 3u);
  const uint8_t want[] = {3,   0,   0,   0,   1,   0,   'a', 0,   3,   0,   'b', 'c',
                          'd', 0,   0,   0,   16,  0,   '0', '1', '2', '3', '4', '5',
                          '6', '7', '8', '9', 'a', 'b', 'c', 'd', 'e', 'f', 0,   0};
  EXPECT_EQ(std::memcmp(buf.data(), want, sizeof want), 0);
  auto back = DecodeKeyList(buf);
  ASSERT_TRUE(back);
  EXPECT_EQ(*back, keys);
  // Only whole keys that fit: 4 + 4 + 8 = 16 bytes hold two.
  std::array<uint8_t, 19> small{};
  EXPECT_EQ(EncodeKeyList(keys, small), 2u);
  EXPECT_EQ(DecodeKeyList(small)->size(), 2u);
  // Malformed: a count past the end, a length of 17.
  std::array<uint8_t, 8> bad = {5, 0, 0, 0, 1, 0, 'a', 0};
  EXPECT_FALSE(DecodeKeyList(bad));
  std::array<uint8_t, 8> longkey = {1, 0, 0, 0, 17, 0, 0, 0};
  EXPECT_FALSE(DecodeKeyList(longkey));
}

TEST(NvmeKvSpecTest, IdentifyNamespaceLayout) {
  KeyValueNamespace ns;
  ns.size_bytes = 0x0102030405060708;
  ns.used_bytes = 42;
  ns.max_value_length = 1u << 26;
  ns.max_keys = 0xffffffff;
  std::array<uint8_t, kIdentifyBytes> out{};
  EncodeKeyValueNamespace(ns, out);
  EXPECT_EQ(out[0], 0x08);  // NSZE bytes 7:0
  EXPECT_EQ(out[7], 0x01);
  EXPECT_EQ(out[16], 42);        // NUSE bytes 23:16
  EXPECT_EQ(out[25], 1);         // NKVF
  EXPECT_EQ(out[72], 16);        // KV format 0: max key length
  EXPECT_EQ(out[76 + 3], 0x04);  // max value length 1 << 26
  EXPECT_EQ(out[80], 0xff);
  auto back = DecodeKeyValueNamespace(out);
  ASSERT_TRUE(back);
  EXPECT_EQ(back->size_bytes, ns.size_bytes);
  EXPECT_EQ(back->max_value_length, ns.max_value_length);

  ControllerIdentity id;
  id.serial = "SN1";
  id.model = "model";
  id.namespaces = 1;
  id.mdts = 5;
  EncodeControllerIdentity(id, out);
  EXPECT_EQ(out[4], 'S');
  EXPECT_EQ(out[7], ' ');  // ASCII padded with spaces
  EXPECT_EQ(out[77], 5);
  EXPECT_EQ(out[512], 0x66);
  EXPECT_EQ(out[513], 0x44);
  EXPECT_EQ(out[516], 1);
  EXPECT_EQ(DecodeControllerIdentity(out).model, "model");
}

TEST(NvmeKvSpecTest, KeyHexNames) {
  Key k = K("\x01\xab");
  EXPECT_EQ(k.ToHex(), "01ab");
  EXPECT_EQ(*Key::FromHex("01ab"), k);
  EXPECT_FALSE(Key::FromHex(""));
  EXPECT_FALSE(Key::FromHex("abc"));
  EXPECT_FALSE(Key::FromHex("0G"));
  EXPECT_FALSE(Key::FromHex(std::string(34, '0')));
  EXPECT_FALSE(Key::FromBytes({}));
}

}  // namespace
}  // namespace objectcache::nvmekv
