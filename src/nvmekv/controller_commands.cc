// The controller's commands: the admin set (identify, features, queue creation and deletion)
// and the key-value I/O commands (store, retrieve, ranged retrieve, list, exist, delete) against
// the store.
#include "nvmekv/controller_impl.h"

namespace objectcache::nvmekv {

Outcome Controller::Impl::RunAdmin(const SubmissionEntry& e) {
  switch (e.opcode()) {
    case admin::kIdentify:
      return Identify(e);
    case admin::kSetFeatures:
      return SetFeatures(e);
    case admin::kGetFeatures:
      return GetFeatures(e);
    case admin::kCreateIoCq:
      return CreateCq(e);
    case admin::kCreateIoSq:
      return CreateSq(e);
    case admin::kDeleteIoSq:
      return DeleteSq(e);
    case admin::kDeleteIoCq:
      return DeleteCq(e);
    default:
      return Fail(Generic(sc::kInvalidOpcode));
  }
}

Outcome Controller::Impl::Identify(const SubmissionEntry& e) {
  auto buf = Data(e.data_pointer(), kIdentifyBytes);
  if (!buf) return Fail(Generic(sc::kDataTransferError));
  uint8_t cns = e.dw[10] & 0xff, csi = static_cast<uint8_t>(e.dw[11] >> 24);
  std::array<uint8_t, kIdentifyBytes> out{};
  switch (cns) {
    case admin::kCnsController: {
      ControllerIdentity id;
      id.serial = "OC" + std::to_string(getpid());
      id.model = "ObjectCache NVMe-KV over " + store_->Uri().substr(0, 14);
      id.firmware = "0.1.0";
      uint32_t pages = opt_.max_value_bytes / kPageBytes;
      while ((uint32_t{1} << id.mdts) < pages) ++id.mdts;
      id.version = 0x00020000;
      id.maxcmd = static_cast<uint16_t>(std::min<uint32_t>(opt_.max_queue_entries, 0xffff));
      id.namespaces = 1;
      EncodeControllerIdentity(id, out);
      break;
    }
    case admin::kCnsNamespace:  // not an NVM namespace: zeros, as the spec asks
      if (e.nsid() != kNamespaceId) return Fail(Generic(sc::kInvalidNamespace));
      break;
    case admin::kCnsActiveNamespaces:
      if (e.nsid() < kNamespaceId) out[0] = kNamespaceId;
      break;
    case admin::kCnsCommandSetNamespace: {
      if (csi != kCommandSetKeyValue) return Fail(Generic(sc::kInvalidField));
      if (e.nsid() != kNamespaceId) return Fail(Generic(sc::kInvalidNamespace));
      KeyValueNamespace ns;
      ns.size_bytes = store_->Capabilities().capacity_bytes.value_or(0);
      ns.used_bytes = store_->Usage().bytes;
      ns.max_value_length = opt_.max_value_bytes;
      ns.max_keys = 0xffffffff;
      EncodeKeyValueNamespace(ns, out);
      break;
    }
    default:
      return Fail(Generic(sc::kInvalidField));
  }
  std::memcpy(buf->data(), out.data(), out.size());
  return {};
}

Outcome Controller::Impl::SetFeatures(const SubmissionEntry& e) {
  switch (e.dw[10] & 0xff) {
    case admin::kFeatureNumberOfQueues: {
      uint32_t nsqr = e.dw[11] & 0xffff, ncqr = e.dw[11] >> 16;
      if (nsqr == 0xffff || ncqr == 0xffff) return Fail(Generic(sc::kInvalidField));
      if (queues_created_) return Fail(Generic(0x0C));  // Command Sequence Error
      granted_io_queues_ =
          static_cast<uint16_t>(std::min<uint32_t>(std::max(nsqr, ncqr) + 1, opt_.max_io_queues));
      return GetFeatures(e);
    }
    case admin::kFeatureKeyValueConfig:
      delete_missing_fails_ = e.dw[11] & 1;
      return {};
    default:
      return Fail(Generic(sc::kInvalidField));
  }
}

Outcome Controller::Impl::GetFeatures(const SubmissionEntry& e) {
  switch (e.dw[10] & 0xff) {
    case admin::kFeatureNumberOfQueues: {
      uint32_t n = granted_io_queues_ - 1u;
      return {Generic(sc::kSuccess), (n << 16) | n, 0};
    }
    case admin::kFeatureKeyValueConfig:
      return {Generic(sc::kSuccess), delete_missing_fails_ ? 1u : 0u, 0};
    default:
      return Fail(Generic(sc::kInvalidField));
  }
}

std::expected<std::byte*, Outcome> Controller::Impl::IoQueueMemory(const SubmissionEntry& e,
                                                                   uint32_t entries,
                                                                   size_t entry_bytes) {
  if (entries < 2 || entries > opt_.max_queue_entries) {
    return std::unexpected(Fail(CommandSpecific(sc::kInvalidQueueSize)));
  }
  std::optional<std::byte*> memory = QueueMemory(e.data_pointer(), entries, entry_bytes);
  if ((e.dw[11] & 1) == 0 || !memory) return std::unexpected(Fail(Generic(sc::kInvalidField)));
  return *memory;
}

Outcome Controller::Impl::CreateCq(const SubmissionEntry& e) {
  uint16_t qid = e.dw[10] & 0xffff;
  uint32_t entries = (e.dw[10] >> 16) + 1;
  uint32_t cc = mem_.Register32(reg::kCc).load(std::memory_order_acquire);
  if (((cc >> reg::kCcIocqesShift) & 0xf) != 4) return Fail(Generic(sc::kInvalidField));
  if (!ValidIoQueueId(qid) || cqs_[qid]) return Fail(CommandSpecific(sc::kInvalidQueueIdentifier));
  auto memory = IoQueueMemory(e, entries, kCompletionEntryBytes);
  if (!memory) return memory.error();
  mem_.Register32(CqHeadDoorbell(qid, kDoorbellStride)).store(0);
  cqs_[qid] = std::make_shared<CompletionQueue>(qid, entries, *memory);
  queues_created_ = true;
  return {};
}

Outcome Controller::Impl::CreateSq(const SubmissionEntry& e) {
  uint16_t qid = e.dw[10] & 0xffff, cqid = static_cast<uint16_t>(e.dw[11] >> 16);
  uint32_t entries = (e.dw[10] >> 16) + 1;
  uint32_t cc = mem_.Register32(reg::kCc).load(std::memory_order_acquire);
  if (((cc >> reg::kCcIosqesShift) & 0xf) != 6) return Fail(Generic(sc::kInvalidField));
  if (!ValidIoQueueId(qid) || sqs_[qid]) return Fail(CommandSpecific(sc::kInvalidQueueIdentifier));
  if (cqid == 0 || cqid >= kMaxQueues || !cqs_[cqid]) {
    return Fail(CommandSpecific(sc::kCompletionQueueInvalid));
  }
  auto memory = IoQueueMemory(e, entries, kSubmissionEntryBytes);
  if (!memory) return memory.error();
  cqs_[cqid]->sq_refs++;
  mem_.Register32(SqTailDoorbell(qid, kDoorbellStride)).store(0);
  sqs_[qid] = std::make_shared<SubmissionQueue>(qid, entries, *memory, cqs_[cqid]);
  active_.push_back(qid);
  queues_created_ = true;
  return {};
}

Outcome Controller::Impl::DeleteSq(const SubmissionEntry& e) {
  uint16_t qid = e.dw[10] & 0xffff;
  if (qid == 0 || qid >= kMaxQueues || !sqs_[qid]) {
    return Fail(CommandSpecific(sc::kInvalidQueueIdentifier));
  }
  std::shared_ptr<SubmissionQueue> sq = std::move(sqs_[qid]);
  std::erase(active_, qid);
  next_ = 0;
  while (sq->in_flight.load() != 0 && !stopping_) std::this_thread::yield();
  sq->cq->sq_refs--;
  return {};
}

Outcome Controller::Impl::DeleteCq(const SubmissionEntry& e) {
  uint16_t qid = e.dw[10] & 0xffff;
  if (qid == 0 || qid >= kMaxQueues || !cqs_[qid]) {
    return Fail(CommandSpecific(sc::kInvalidQueueIdentifier));
  }
  if (cqs_[qid]->sq_refs > 0) return Fail(CommandSpecific(sc::kInvalidQueueDeletion));
  cqs_[qid].reset();
  return {};
}

Outcome Controller::Impl::RunIo(const SubmissionEntry& e) {
  uint8_t op = e.opcode();
  if (op != kv::kStore && op != kv::kRetrieve && op != kv::kRetrieveRange && op != kv::kList &&
      op != kv::kDelete && op != kv::kExist) {
    return Fail(Generic(sc::kInvalidOpcode));
  }
  if (e.nsid() != kNamespaceId) return Fail(Generic(sc::kInvalidNamespace));
  uint8_t kl = KeyLength(e);
  if (kl == 0 || kl > kMaxKeyLength) return Fail(Generic(sc::kInvalidKeySize));
  Key key = KeyOf(e);
  std::string name = opt_.name_prefix + key.ToHex();
  switch (op) {
    case kv::kStore:
      return StoreValue(e, name);
    case kv::kRetrieve:
      return Retrieve(e, name);
    case kv::kRetrieveRange:
      return RetrieveRange(e, name);
    case kv::kList:
      return List(e, key);
    case kv::kDelete: {
      Status s = store_->Delete(name);
      if (s.code() == StatusCode::kNotFound && !delete_missing_fails_) return {};
      return Fail(FromStore(s));
    }
    default: {  // Exist
      const std::string_view view = name;
      auto r = store_->Exist(std::span(&view, 1));
      if (!r.ok()) return Fail(FromStore(r.status()));
      return (*r)[0] ? Outcome{} : Fail(Generic(sc::kKeyDoesNotExist));
    }
  }
}

Outcome Controller::Impl::StoreValue(const SubmissionEntry& e, const std::string& name) {
  uint32_t size = e.dw[10];
  uint8_t options = static_cast<uint8_t>(e.dw[11] >> 8);
  if (size > opt_.max_value_bytes) return Fail(Generic(sc::kInvalidValueSize));
  bool update_only = options & kv::kStoreUpdateOnly, create_only = options & kv::kStoreCreateOnly;
  if (update_only && create_only) return Fail(Generic(sc::kInvalidField));
  auto value = Data(e.data_pointer(), size);
  if (!value) return Fail(Generic(sc::kDataTransferError));
  PutOptions put;
  if (update_only || (create_only && !store_->Capabilities().conditional_put)) {
    // Not atomic against a concurrent Delete or Store of the same key; the command set
    // orders no two commands on one key.
    auto st = store_->Stat(name);
    if (!st.ok() && st.status().code() != StatusCode::kNotFound)
      return Fail(FromStore(st.status()));
    if (update_only && !st.ok()) return Fail(Generic(sc::kKeyDoesNotExist));
    if (create_only && st.ok()) return Fail(Generic(sc::kKeyExists));
  } else if (create_only) {
    put.if_absent = true;
  }
  return Fail(FromStore(store_->Put(name, *value, put)));
}

Outcome Controller::Impl::Retrieve(const SubmissionEntry& e, const std::string& name) {
  auto dest = Data(e.data_pointer(), e.dw[10]);
  if (!dest) return Fail(Generic(sc::kDataTransferError));
  uint64_t size = 0;
  Result<size_t> whole = dest->empty() ? Result<size_t>(ResourceExhaustedError("no buffer"))
                                       : store_->Retrieve(name, *dest);
  if (whole.ok()) {
    size = *whole;
  } else if (whole.status().code() == StatusCode::kResourceExhausted) {
    // The value is larger than the buffer: its first bytes, and its size in DW0.
    auto reader = store_->OpenReader(name);
    if (!reader.ok()) return Fail(FromStore(reader.status()));
    size = (*reader)->size();
    size_t n = static_cast<size_t>(std::min<uint64_t>(size, dest->size()));
    Status s = (*reader)->ReadAt(0, dest->first(n));
    if (!s.ok()) return Fail(FromStore(s));
  } else {
    return Fail(FromStore(whole.status()));
  }
  if (size > UINT32_MAX) return Fail(Generic(sc::kInvalidValueSize));
  return {Generic(sc::kSuccess), static_cast<uint32_t>(size), 0};
}

Outcome Controller::Impl::RetrieveRange(const SubmissionEntry& e, const std::string& name) {
  auto dest = Data(e.data_pointer(), e.dw[10]);
  if (!dest) return Fail(Generic(sc::kDataTransferError));
  uint64_t offset = e.dw[12] | (uint64_t{e.dw[13]} << 32);
  RangeRead read{name, offset, *dest, {}};
  Status s = store_->RetrieveRanges(std::span<RangeRead>(&read, 1));
  if (!s.ok()) return Fail(FromStore(s));
  if (read.status.ok()) return {Generic(sc::kSuccess), e.dw[10], 0};
  if (read.status.code() != StatusCode::kOutOfRange) return Fail(FromStore(read.status));
  // The value ends inside the range: the bytes up to its end.
  auto reader = store_->OpenReader(name);
  if (!reader.ok()) return Fail(FromStore(reader.status()));
  uint64_t size = (*reader)->size();
  if (offset > size) return Fail(Generic(sc::kInvalidField));
  size_t n = static_cast<size_t>(std::min<uint64_t>(size - offset, dest->size()));
  s = (*reader)->ReadAt(offset, dest->first(n));
  if (!s.ok()) return Fail(FromStore(s));
  return {Generic(sc::kSuccess), static_cast<uint32_t>(n), 0};
}

Outcome Controller::Impl::List(const SubmissionEntry& e, const Key& start) {
  auto dest = Data(e.data_pointer(), e.dw[10]);
  if (!dest) return Fail(Generic(sc::kDataTransferError));
  if (dest->size() < 4) return Fail(Generic(sc::kInvalidField));
  const std::string& prefix = opt_.name_prefix;
  std::string first = prefix + start.ToHex();
  std::vector<Key> keys;
  size_t bytes = 4;
  auto add = [&](const Key& k) {
    size_t need = (2 + size_t{k.length} + 3) / 4 * 4;
    if (dest->size() - bytes < need) return false;
    bytes += need;
    keys.push_back(k);
    return true;
  };
  auto st = store_->Stat(first);
  if (!st.ok() && st.status().code() != StatusCode::kNotFound) return Fail(FromStore(st.status()));
  bool room = !st.ok() || add(start);
  ListOptions lo;
  lo.prefix = prefix;
  lo.start_after = first;
  while (room) {
    lo.max_keys = std::min<size_t>(1000, (dest->size() - bytes) / 4 + 1);
    auto page = store_->List(lo);
    if (!page.ok()) return Fail(FromStore(page.status()));
    for (const ObjectInfo& o : page->objects) {
      std::optional<Key> k = Key::FromHex(std::string_view(o.key).substr(prefix.size()));
      if (k && !(room = add(*k))) break;
    }
    if (!page->truncated || page->objects.empty()) break;
    lo.start_after = page->objects.back().key;
  }
  size_t n = EncodeKeyList(keys, std::span(reinterpret_cast<uint8_t*>(dest->data()), dest->size()));
  return {Generic(sc::kSuccess), static_cast<uint32_t>(n), 0};
}

}  // namespace objectcache::nvmekv
