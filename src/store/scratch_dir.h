// Scratch directories for tests: a fresh temporary directory per test.
#pragma once

#include <string>

namespace objectcache {

// A path DIR/store inside a fresh, empty temporary directory DIR; DIR/store does not exist yet.
std::string MakeScratchDir();
// Removes the temporary directory made by MakeScratchDir, with everything in it.
void RemoveTree(const std::string& scratch_dir);

}  // namespace objectcache
