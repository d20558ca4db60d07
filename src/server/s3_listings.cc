// Listing a bucket's objects (ListObjects and ListObjectsV2; versions are in
// s3_versions_acl.cc).
#include <algorithm>

#include "s3/crypto.h"
#include "s3/xml.h"
#include "server/s3_handler.h"

namespace objectcache::server {

// The S3 protocol pieces (src/s3): SigV4, errors, XML, request parsing.
using namespace ::objectcache::s3;

void WriteCommonPrefixes(XmlWriter* w, const std::vector<std::string>& prefixes, bool url_encoded) {
  for (const std::string& p : prefixes) {
    w->Open("CommonPrefixes");
    w->Element("Prefix", ListingName(p, url_encoded));
    w->Close("CommonPrefixes");
  }
}

Result<S3Handler::Listing> S3Handler::ListBucket(const std::string& bucket,
                                                 const std::string& prefix,
                                                 const std::string& delimiter,
                                                 const std::string& position, size_t max_keys) {
  const std::string base = bucket + "/";
  Listing out;
  if (max_keys == 0) return out;  // nothing asked for, nothing truncated (as S3 answers)
  std::string after = position;
  // With a delimiter, every common prefix restarts the store listing past it, so the store is
  // asked for small pages first (a page costs the store about max_keys names per index shard),
  // doubling while no prefix cuts them short.
  size_t page_keys = delimiter.empty() ? SIZE_MAX : 16;
  for (;;) {
    const size_t want = max_keys - out.objects.size() - out.prefixes.size();
    ListOptions o{.prefix = base + prefix,
                  .start_after = after.empty() ? std::string() : base + after,
                  .max_keys = std::min(want + 1, page_keys)};
    OC_ASSIGN_OR_RETURN(ListPage page, store_->List(o));
    bool restart = false;
    for (const ObjectInfo& info : page.objects) {
      if (out.objects.size() + out.prefixes.size() == max_keys) {
        out.truncated = true;  // at least one more name follows
        return out;
      }
      std::string name = info.key.substr(base.size());
      if (!delimiter.empty()) {
        size_t d = name.find(delimiter, prefix.size());
        if (d != std::string::npos) {
          std::string cp = name.substr(0, d + delimiter.size());
          // A prefix at or before the resume point was returned by an earlier page.
          if (position.empty() || cp > position) {
            out.prefixes.push_back(cp);
            out.last = cp;
          }
          after = cp + "\xff";  // past every name under this prefix (UTF-8 has no 0xff)
          restart = true;
          break;
        }
      }
      std::string etag;
      int64_t mtime = 0;
      if (Result<std::unique_ptr<ObjectReader>> rd = store_->OpenReader(info.key)) {
        if (auto a = ObjectAttributes::Decode((*rd)->attributes())) etag = a->etag;
        mtime = (*rd)->mtime();
      } else {
        continue;  // deleted meanwhile
      }
      out.objects.push_back({name, info.size, etag, mtime});
      out.last = name;
      after = name;
    }
    if (restart) continue;
    if (!page.truncated) break;
    if (page_keys < SIZE_MAX / 2) page_keys *= 2;
  }
  return out;
}

asio::awaitable<S3Result<void>> S3Handler::ListObjects(Ctx& c, bool v2) {
  const S3Request& r = c.req;
  const std::string prefix = r.QueryValue("prefix"), delimiter = r.QueryValue("delimiter");
  auto url_encoded = QueryUrlEncoding(r);
  if (!url_encoded) co_return std::unexpected(url_encoded.error());
  const bool url = *url_encoded;
  // ListObjects (v1) always names each object's owner; v2 when asked to.
  const bool owner = !v2 || r.QueryValue("fetch-owner") == "true";
  auto max_keys = QueryNumber(r, "max-keys", 1000, 1000);
  if (!max_keys) co_return std::unexpected(max_keys.error());
  std::string position;  // list names strictly after this
  if (v2) {
    if (const std::string* token = r.Query("continuation-token")) {
      if (!Base64Decode(*token, &position)) {
        co_return Fail("InvalidArgument", "The continuation token provided is incorrect");
      }
    } else {
      position = r.QueryValue("start-after");
    }
  } else {
    position = r.QueryValue("marker");
  }
  auto listing = co_await Blocking(
      [&] { return ListBucket(r.bucket, prefix, delimiter, position, *max_keys); });
  if (!listing) co_return std::unexpected(FromStatus(listing.error()));
  XmlWriter w;
  w.Open("ListBucketResult", true);
  w.Element("Name", r.bucket);
  w.Element("Prefix", ListingName(prefix, url));
  if (!delimiter.empty()) w.Element("Delimiter", ListingName(delimiter, url));
  w.Element("MaxKeys", std::to_string(*max_keys));
  if (url) w.Element("EncodingType", "url");
  w.Element("IsTruncated", listing->truncated ? "true" : "false");
  if (v2) {
    w.Element("KeyCount", std::to_string(listing->objects.size() + listing->prefixes.size()));
    if (const std::string* t = r.Query("continuation-token")) w.Element("ContinuationToken", *t);
    if (const std::string* after = r.Query("start-after")) {
      w.Element("StartAfter", ListingName(*after, url));
    }
    if (listing->truncated) w.Element("NextContinuationToken", Base64Encode(listing->last));
  } else {
    w.Element("Marker", ListingName(position, url));
    if (listing->truncated && !delimiter.empty()) {
      w.Element("NextMarker", ListingName(listing->last, url));
    }
  }
  for (const Listing::Object& o : listing->objects) {
    w.Open("Contents");
    w.Element("Key", ListingName(o.key, url));
    w.Element("LastModified", IsoTime(o.mtime));
    w.Element("ETag", "\"" + o.etag + "\"");
    w.Element("Size", std::to_string(o.size));
    if (owner) WriteOwner(&w);
    w.Element("StorageClass", "STANDARD");
    w.Close("Contents");
  }
  WriteCommonPrefixes(&w, listing->prefixes, url);
  w.Close("ListBucketResult");
  co_return co_await ReplyXml(c, w.Finish());
}

asio::awaitable<S3Result<void>> S3Handler::ListObjectsV1(Ctx& c) { return ListObjects(c, false); }
asio::awaitable<S3Result<void>> S3Handler::ListObjectsV2(Ctx& c) { return ListObjects(c, true); }

}  // namespace objectcache::server
