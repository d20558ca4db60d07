// S3Store: the Store interface over any S3 server (s3://HOST:PORT/BUCKET; HTTPS with
// ?tls=true, verified against the system's CAs or the PEM bundle ?ca_file=PATH).
//
// Plain S3 only (no ObjectCache extension), so it works against our server, radosgw or any
// other: PUT, GET with Range and If-Match, HEAD, DELETE, ListObjectsV2. Store attributes travel
// as the user metadata x-amz-meta-objectcache-attrs (base64). Reads of one object within one
// call are pinned to one version with If-Match on its ETag. Credentials come from the
// environment (OBJECTCACHE_ACCESS_KEY / OBJECTCACHE_SECRET_KEY, else AWS_ACCESS_KEY_ID /
// AWS_SECRET_ACCESS_KEY); without them requests go unsigned. Usage() is not known (zeros).
// Thread-safe: requests go over a pool of keep-alive connections.
#pragma once

#include <memory>
#include <string_view>

#include "objectcache/store.h"

namespace objectcache {

Result<std::unique_ptr<Store>> OpenS3Store(std::string_view uri);

// Makes OpenStore("s3://...") open an S3Store.
void RegisterS3Store();

}  // namespace objectcache
