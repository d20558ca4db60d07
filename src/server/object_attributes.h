// S3 object metadata as stored in a store object's attributes: ETag, content type, user
// metadata (x-amz-meta-*), the standard headers S3 stores and returns
// (Cache-Control, Content-Disposition, Content-Encoding, Content-Language, Expires), and the
// additional checksum it was stored with.
// Encoded as compact JSON (docs/s3-api.md).
#pragma once

#include <ctime>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "server/http_server.h"

namespace objectcache::server {

struct ObjectAttributes {
  std::string etag;  // hex MD5, or hex-N for multipart; without quotes
  std::string content_type = "binary/octet-stream";
  std::vector<std::pair<std::string, std::string>> user_metadata;   // names without x-amz-meta-
  std::vector<std::pair<std::string, std::string>> stored_headers;  // lowercase names
  // The x-amz-checksum-* header (lowercase) and base64 value the payload was checked against
  // when stored; answered for the whole object to a GET or HEAD that asks for it.
  std::optional<std::pair<std::string, std::string>> checksum;

  std::string Encode() const;
  static std::optional<ObjectAttributes> Decode(std::string_view text);

  // Takes content type, user metadata and stored headers from request headers.
  static ObjectAttributes FromRequest(const Headers& headers);
  // Adds ETag, Content-Type, x-amz-meta-* and stored headers to a response.
  void AddTo(Headers* response) const;
  // Adds the checksum (and x-amz-checksum-type FULL_OBJECT), when there is one, to a response
  // of the whole object (a GET or HEAD with x-amz-checksum-mode: ENABLED, as S3 answers it).
  void AddChecksumTo(Headers* response) const;
  // GetObject's and HeadObject's response-* query parameters, as S3 takes them:
  // response-content-type replaces the content type, response-cache-control,
  // -content-disposition, -content-encoding, -content-language and -expires their stored
  // header, for this response. Returns the name of a parameter whose value holds a control
  // character (it would end the header line), after which nothing is replaced; else nullopt.
  std::optional<std::string> OverrideFromQuery(
      const std::vector<std::pair<std::string, std::string>>& query);
  // Bytes of user metadata as S3 counts them (names and values).
  size_t UserMetadataBytes() const;
};

std::string HttpTime(std::time_t t);  // "Mon, 30 Nov 2026 14:20:05 GMT"
std::string IsoTime(std::time_t t);   // "2026-11-30T14:20:05.000Z"
// RFC 1123 (and RFC 850 / asctime) dates; nullopt if unparseable.
std::optional<std::time_t> ParseHttpTime(std::string_view text);
// ISO 8601 in UTC as S3 writes it ("2026-11-30T14:20:05.000Z"; the fraction is optional and
// ignored); nullopt if unparseable.
std::optional<std::time_t> ParseIsoTime(std::string_view text);

}  // namespace objectcache::server
