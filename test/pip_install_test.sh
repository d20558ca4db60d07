#!/usr/bin/env bash
# `pip install .` of the Python package, as a user installs it: into a fresh virtualenv (with
# the system's packages, for torch), from a copy of the tracked sources, offline (no build
# isolation: the build backend is Debian's setuptools). The extension module is built by CMake
# in BUILD_DIR (OBJECTCACHE_BUILD_DIR), already built there by the tests' build. The installed
# package must import from the virtualenv and give the golden chunk key of docs/keys.md.
#   test/pip_install_test.sh BUILD_DIR
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
build="$(cd "$1" && pwd)"
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
mkdir "$work/src"
git -C "$root" ls-files -z | (cd "$root" && xargs -0 tar cf -) | tar xf - -C "$work/src"
/usr/bin/python3 -m venv --system-site-packages "$work/venv"
OBJECTCACHE_BUILD_DIR="$build" "$work/venv/bin/pip" install --no-build-isolation --no-deps \
  --no-index --quiet "$work/src"
cd "$work"
key="$("$work/venv/bin/python" - "$work/venv" <<'EOF'
import sys
import objectcache
import objectcache.connector  # noqa: F401 (the pure-Python parts came with it)
assert objectcache.__file__.startswith(sys.argv[1]), objectcache.__file__
layout = objectcache.layout_for_model("llama-3.1-8b", 32, 8, 128, "bf16")
print(objectcache.chunk_keys(list(range(16)), layout)[0].hex())
EOF
)"
if [ "$key" != "6d0f5c5d66016c150b2cafada81c8810" ]; then
  echo "pip_install_test: the installed package gave key $key"
  exit 1
fi
echo "pip_install_test: pip install . gives an importable objectcache"
