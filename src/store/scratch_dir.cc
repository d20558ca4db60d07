#include "store/scratch_dir.h"

#include <cstdlib>
#include <filesystem>

namespace objectcache {

std::string MakeScratchDir() {
  std::string tmpl = (std::filesystem::temp_directory_path() / "objectcache-test-XXXXXX").string();
  char* dir = ::mkdtemp(tmpl.data());
  if (dir == nullptr) std::abort();
  return std::string(dir) + "/store";
}

void RemoveTree(const std::string& scratch_dir) {
  std::error_code ec;
  std::filesystem::remove_all(std::filesystem::path(scratch_dir).parent_path(), ec);
}

}  // namespace objectcache
