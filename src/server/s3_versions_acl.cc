// Versions, versioning and ACLs, answered as S3 answers them for an unversioned bucket with one
// owner (docs/s3-api.md, "Versions and ACLs"): a cache keeps one version of each object, whose
// id is "null", and serves everything to the credentials it was given, so the only ACL it can
// honour is "private".
#include <charconv>

#include "s3/xml.h"
#include "server/s3_handler.h"

namespace objectcache::server {

// The S3 protocol pieces (src/s3): SigV4, errors, XML, request parsing.
using namespace ::objectcache::s3;
namespace {

// Is this ACL body the owner with FULL_CONTROL and nothing else (what "private" means)?
bool IsPrivatePolicy(const XmlElement& root) {
  if (root.name != "AccessControlPolicy") return false;
  const XmlElement* list = root.Child("AccessControlList");
  if (list == nullptr) return false;
  size_t grants = 0;
  for (const XmlElement& g : list->children) {
    if (g.name != "Grant") continue;
    ++grants;
    const XmlElement* grantee = g.Child("Grantee");
    const XmlElement* permission = g.Child("Permission");
    const XmlElement* id = grantee ? grantee->Child("ID") : nullptr;
    if (id == nullptr || id->text != kOwnerId || permission == nullptr ||
        permission->text != "FULL_CONTROL") {
      return false;
    }
  }
  return grants == 1;
}

}  // namespace

asio::awaitable<S3Result<void>> S3Handler::ListObjectVersions(Ctx& c) {
  const S3Request& r = c.req;
  const std::string prefix = r.QueryValue("prefix"), delimiter = r.QueryValue("delimiter"),
                    key_marker = r.QueryValue("key-marker");
  const std::string version_marker = r.QueryValue("version-id-marker");
  auto url_encoded = QueryUrlEncoding(r);
  if (!url_encoded) co_return std::unexpected(url_encoded.error());
  const bool url = *url_encoded;
  if (!version_marker.empty() && (key_marker.empty() || version_marker != "null")) {
    co_return Fail("InvalidArgument",
                   "version-id-marker must be \"null\" (every version here is), with key-marker");
  }
  auto max_keys = QueryNumber(r, "max-keys", 1000, 1000);
  if (!max_keys) co_return std::unexpected(max_keys.error());
  // One version per key: the version after (key-marker, null) is the next key's.
  auto listing = co_await Blocking(
      [&] { return ListBucket(r.bucket, prefix, delimiter, key_marker, *max_keys); });
  if (!listing) co_return std::unexpected(FromStatus(listing.error()));
  XmlWriter w;
  w.Open("ListVersionsResult", true);
  w.Element("Name", r.bucket);
  w.Element("Prefix", ListingName(prefix, url));
  w.Element("KeyMarker", ListingName(key_marker, url));
  w.Element("VersionIdMarker", version_marker);
  if (listing->truncated) {
    w.Element("NextKeyMarker", ListingName(listing->last, url));
    w.Element("NextVersionIdMarker", "null");
  }
  w.Element("MaxKeys", std::to_string(*max_keys));
  if (!delimiter.empty()) w.Element("Delimiter", ListingName(delimiter, url));
  if (url) w.Element("EncodingType", "url");
  w.Element("IsTruncated", listing->truncated ? "true" : "false");
  for (const Listing::Object& o : listing->objects) {
    w.Open("Version");
    w.Element("Key", ListingName(o.key, url));
    w.Element("VersionId", "null");
    w.Element("IsLatest", "true");
    w.Element("LastModified", IsoTime(o.mtime));
    w.Element("ETag", "\"" + o.etag + "\"");
    w.Element("Size", std::to_string(o.size));
    WriteOwner(&w, "Owner");
    w.Element("StorageClass", "STANDARD");
    w.Close("Version");
  }
  WriteCommonPrefixes(&w, listing->prefixes, url);
  w.Close("ListVersionsResult");
  co_return co_await ReplyXml(c, w.Finish());
}

asio::awaitable<S3Result<void>> S3Handler::BucketVersioning(Ctx& c, bool put) {
  if (!put) {
    // A bucket that never had versioning enabled answers an empty configuration.
    XmlWriter w;
    w.Open("VersioningConfiguration", true);
    w.Close("VersioningConfiguration");
    co_return co_await ReplyXml(c, w.Finish());
  }
  auto body = co_await ReadSmallBody(c, 64 << 10);
  if (!body) co_return std::unexpected(body.error());
  XmlElement root;
  std::string why;
  if (!ParseXml(*body, &root, &why) || root.name != "VersioningConfiguration") {
    co_return Fail("MalformedXML", "PutBucketVersioning body: " +
                                       (why.empty() ? "not <VersioningConfiguration>" : why));
  }
  const XmlElement* status = root.Child("Status");
  if (status != nullptr && status->text == "Enabled") {
    co_return Fail("NotImplemented",
                   "objectcache keeps one version of each object: versioning cannot be enabled");
  }
  if (status != nullptr && status->text != "Suspended") {
    co_return Fail("MalformedXML", "versioning Status must be Enabled or Suspended");
  }
  // Suspended (or no status): what an unversioned bucket already is.
  co_return co_await Reply(c, 200);
}

asio::awaitable<S3Result<void>> S3Handler::ObjectExists(Ctx& c) {
  if (c.req.key.empty()) co_return S3Result<void>();
  Result<ObjectInfo> info =
      co_await Blocking([&] { return store_->Stat(ObjectKey(c.req.bucket, c.req.key)); });
  if (info) co_return S3Result<void>();
  if (info.error().code() == StatusCode::kNotFound) {
    co_return Fail("NoSuchKey", "The specified key does not exist.");
  }
  co_return std::unexpected(FromStatus(info.error()));
}

asio::awaitable<S3Result<void>> S3Handler::GetAcl(Ctx& c) {
  if (auto exists = co_await ObjectExists(c); !exists) co_return exists;
  XmlWriter w;
  w.Open("AccessControlPolicy", true);
  WriteOwner(&w, "Owner");
  w.Open("AccessControlList");
  w.Open("Grant");
  w.OpenWithAttributes("Grantee",
                       "xmlns:xsi=\"http://www.w3.org/2001/XMLSchema-instance\" "
                       "xsi:type=\"CanonicalUser\"");
  w.Element("ID", kOwnerId);
  w.Element("DisplayName", kOwnerId);
  w.Close("Grantee");
  w.Element("Permission", "FULL_CONTROL");
  w.Close("Grant");
  w.Close("AccessControlList");
  w.Close("AccessControlPolicy");
  co_return co_await ReplyXml(c, w.Finish());
}

asio::awaitable<S3Result<void>> S3Handler::PutAcl(Ctx& c) {
  const S3Request& r = c.req;
  const auto refuse = [] {
    return Fail("NotImplemented",
                "objectcache serves everything to its own credentials only: the only ACL it "
                "honours is private (the owner with FULL_CONTROL; bucket-owner-full-control is "
                "the same here)");
  };
  for (const auto& [name, value] : r.headers) {
    if (name.starts_with("x-amz-grant-")) co_return refuse();
  }
  auto body = co_await ReadSmallBody(c, 64 << 10);
  if (!body) co_return std::unexpected(body.error());
  if (const std::string* canned = r.Header("x-amz-acl")) {
    if (!IsOwnerOnlyAcl(*canned) || !body->empty()) co_return refuse();
  } else {
    XmlElement root;
    std::string why;
    if (!ParseXml(*body, &root, &why)) co_return Fail("MalformedXML", "ACL body: " + why);
    if (!IsPrivatePolicy(root)) co_return refuse();
  }
  if (auto exists = co_await ObjectExists(c); !exists) co_return exists;
  co_return co_await Reply(c, 200);
}

asio::awaitable<S3Result<void>> S3Handler::GetBucketVersioning(Ctx& c) {
  return BucketVersioning(c, false);
}
asio::awaitable<S3Result<void>> S3Handler::PutBucketVersioning(Ctx& c) {
  return BucketVersioning(c, true);
}

}  // namespace objectcache::server
