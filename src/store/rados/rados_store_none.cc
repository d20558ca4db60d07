// The RADOS backend in a build without librados: every open says so.
#include "store/rados/rados_store.h"

namespace objectcache {

bool RadosStoreAvailable() { return false; }

Result<std::unique_ptr<Store>> OpenRadosStore(const RadosStoreOptions&) {
  return UnimplementedError(
      "this build has no RADOS backend: install librados-dev and libradospp-dev and rebuild");
}

Result<RadosSequentialRead> ReadRadosObjectsSequentially(Store&, std::span<const std::string>,
                                                         int) {
  return UnimplementedError("this build has no RADOS backend");
}

}  // namespace objectcache
