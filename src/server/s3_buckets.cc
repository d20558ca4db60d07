// The service and its buckets: listing, creating and deleting buckets, and their names' rules.
#include <algorithm>
#include <nlohmann/json.hpp>

#include "s3/crypto.h"
#include "s3/xml.h"
#include "server/s3_handler.h"

namespace objectcache::server {

// The S3 protocol pieces (src/s3): SigV4, errors, XML, request parsing.
using namespace ::objectcache::s3;

bool ValidBucketName(std::string_view b) {
  if (b.size() < 3 || b.size() > 63) return false;
  for (char c : b) {
    if (!((c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '-' || c == '.')) return false;
  }
  auto alnum = [](char c) { return (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9'); };
  return alnum(b.front()) && alnum(b.back()) && b.find("..") == std::string_view::npos;
}

namespace {

// AWS's rules for a new bucket's name, past ValidBucketName: no period next to a hyphen, not an
// IPv4 address, none of the prefixes and suffixes AWS reserves. Only creation checks them, so
// buckets made before keep working.
bool ValidNewBucketName(std::string_view b) {
  if (!ValidBucketName(b) || b.find(".-") != std::string_view::npos ||
      b.find("-.") != std::string_view::npos) {
    return false;
  }
  for (std::string_view prefix : {"xn--", "sthree-", "amzn-s3-demo-"}) {
    if (b.starts_with(prefix)) return false;
  }
  for (std::string_view suffix : {"-s3alias", "--ol-s3", ".mrap", "--x-s3", "--table-s3"}) {
    if (b.ends_with(suffix)) return false;
  }
  // Four dot-separated decimal numbers: formatted as an IP address.
  int parts = 0;
  bool digits_only = true;
  for (size_t start = 0; start <= b.size(); ++parts) {
    size_t dot = std::min(b.find('.', start), b.size());
    std::string_view part = b.substr(start, dot - start);
    digits_only = digits_only && !part.empty() && part.size() <= 3 &&
                  part.find_first_not_of("0123456789") == std::string_view::npos;
    start = dot + 1;
  }
  return !(digits_only && parts == 4);
}

}  // namespace

void WriteOwner(XmlWriter* w, std::string_view element) {
  w->Open(element);
  w->Element("ID", kOwnerId);
  w->Element("DisplayName", kOwnerId);
  w->Close(element);
}

asio::awaitable<S3Result<void>> S3Handler::ListBuckets(Ctx& c) {
  const S3Request& r = c.req;
  // Every bucket unless max-buckets asks for pages (1 to 10000, as S3 takes it).
  std::optional<uint64_t> max_buckets;
  if (r.Query("max-buckets")) {
    auto n = QueryNumber(r, "max-buckets", 0, UINT64_MAX);
    if (!n) co_return std::unexpected(n.error());
    if (*n < 1 || *n > 10000) co_return Fail("InvalidArgument", "max-buckets must be 1 to 10000");
    max_buckets = *n;
  }
  const std::string prefix = r.QueryValue("prefix");
  std::string after;
  if (const std::string* token = r.Query("continuation-token")) {
    if (!Base64Decode(*token, &after) || after.empty()) {
      co_return Fail("InvalidArgument", "The continuation token provided is incorrect");
    }
  }
  // All buckets are in this server's region: another region has none.
  const std::string* region = r.Query("bucket-region");
  const bool other_region = region != nullptr && *region != options_.region;
  struct Bucket {
    std::string name;
    int64_t created = 0;
  };
  struct Page {
    std::vector<Bucket> buckets;
    bool truncated = false;
  };
  auto page = co_await Blocking([&]() -> Result<Page> {
    Page out;
    if (other_region) return out;
    const size_t want = max_buckets.value_or(SIZE_MAX - 1);
    std::string start = after.empty() ? std::string() : std::string(kBucketPrefix) + after;
    for (;;) {
      OC_ASSIGN_OR_RETURN(ListPage names,
                          store_->List({.prefix = std::string(kBucketPrefix) + prefix,
                                        .start_after = start,
                                        .max_keys = std::min<size_t>(want + 1, 1000)}));
      for (const ObjectInfo& info : names.objects) {
        start = info.key;
        Result<std::string> meta = ReadWholeObject(*store_, info.key, kMaxRecordBytes);
        if (!meta) continue;  // deleted meanwhile
        if (out.buckets.size() == want) {
          out.truncated = true;
          return out;
        }
        nlohmann::json j = nlohmann::json::parse(*meta, nullptr, false);
        out.buckets.push_back(
            {info.key.substr(kBucketPrefix.size()),
             j.is_object() && j["created"].is_number_integer() ? j["created"].get<int64_t>() : 0});
      }
      if (!names.truncated) return out;
    }
  });
  if (!page) co_return std::unexpected(FromStatus(page.error()));
  XmlWriter w;
  w.Open("ListAllMyBucketsResult", true);
  WriteOwner(&w);
  w.Open("Buckets");
  for (const Bucket& b : page->buckets) {
    w.Open("Bucket");
    w.Element("Name", b.name);
    w.Element("CreationDate", IsoTime(b.created));
    w.Element("BucketRegion", options_.region);
    w.Close("Bucket");
  }
  w.Close("Buckets");
  if (page->truncated) w.Element("ContinuationToken", Base64Encode(page->buckets.back().name));
  if (r.Query("prefix")) w.Element("Prefix", prefix);
  w.Close("ListAllMyBucketsResult");
  co_return co_await ReplyXml(c, w.Finish());
}

asio::awaitable<S3Result<void>> S3Handler::CreateBucket(Ctx& c) {
  const std::string& bucket = c.req.bucket;
  if (!ValidNewBucketName(bucket)) {
    co_return Fail("InvalidBucketName",
                   "The specified bucket is not valid: 3-63 characters of a-z, 0-9, '.' and "
                   "'-', beginning and ending with a letter or digit, no '..', '.-' or '-.', "
                   "not an IP address, no prefix xn-- or sthree-, no suffix -s3alias or --ol-s3");
  }
  // The body may carry a CreateBucketConfiguration; any region is accepted.
  auto body = co_await ReadSmallBody(c, 64 << 10);
  if (!body) co_return std::unexpected(body.error());
  if (!body->empty()) {
    XmlElement root;
    std::string why;
    if (!ParseXml(*body, &root, &why)) co_return Fail("MalformedXML", why);
  }
  nlohmann::json meta;
  meta["created"] = static_cast<int64_t>(std::time(nullptr));
  if (const std::string* layout = c.req.Header("x-objectcache-kv-layout")) {
    Result<ModelPreset> model =
        layout->starts_with("{") ? ParseModelJson(*layout) : FindModelPreset(*layout);
    if (!model)
      co_return Fail("InvalidArgument", "x-objectcache-kv-layout: " + model.error().message());
    meta["layout"] = nlohmann::json::parse(ModelToJson(*model));
  }
  if (options_.bucket_elsewhere &&
      co_await Blocking([&] { return options_.bucket_elsewhere(bucket); })) {
    co_return Fail("BucketAlreadyExists",
                   "The requested bucket name is not available. The bucket namespace is shared "
                   "by all tenants of this server.");
  }
  const std::string key = std::string(kBucketPrefix) + bucket;
  Status s = co_await Blocking([&]() -> Status {
    const std::string text = meta.dump();
    // Created only if absent, atomically, so that of two racing creates (with different
    // layouts, say) exactly one wins. A store without conditional puts (s3://) gets the check
    // and the write under this gateway's lock: safe for one gateway only (docs/s3-api.md).
    if (store_->Capabilities().conditional_put) {
      return store_->Put(key, AsBytes(text), {.if_absent = true});
    }
    std::lock_guard lock(bucket_create_mu_);
    if (store_->Stat(key).has_value()) return AlreadyExistsError("bucket exists");
    return store_->Put(key, AsBytes(text));
  });
  if (s.code() == StatusCode::kAlreadyExists) {
    co_return Fail(
        "BucketAlreadyOwnedByYou",
        "Your previous request to create the named bucket succeeded and you already own it.");
  }
  if (!s.ok()) co_return std::unexpected(FromStatus(s));
  Headers h{{"Location", "/" + bucket}};
  co_return co_await Reply(c, 200, std::move(h));
}

asio::awaitable<S3Result<void>> S3Handler::DeleteBucket(Ctx& c) {
  Status s = co_await Blocking([&]() -> Status {
    OC_ASSIGN_OR_RETURN(
        ListPage page,
        store_->List({.prefix = c.req.bucket + "/", .start_after = "", .max_keys = 1}));
    if (!page.objects.empty()) return FailedPreconditionError("not empty");
    // Unfinished multipart uploads go with the bucket (docs/s3-api.md): none is left orphaned.
    OC_RETURN_IF_ERROR(RemoveBucketUploads(c.req.bucket));
    return store_->Delete(std::string(kBucketPrefix) + c.req.bucket);
  });
  ForgetBucket(c.req.bucket);
  if (s.code() == StatusCode::kFailedPrecondition) {
    co_return Fail("BucketNotEmpty", "The bucket you tried to delete is not empty");
  }
  if (!s.ok() && s.code() != StatusCode::kNotFound) co_return std::unexpected(FromStatus(s));
  co_return co_await Reply(c, 204);
}

}  // namespace objectcache::server
