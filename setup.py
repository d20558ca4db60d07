"""Builds the extension module `objectcache._native` with the project's CMake for `pip install .`
(pyproject.toml holds everything else)."""
import glob
import os
import shutil
import subprocess
import sys

from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext

ROOT = os.path.dirname(os.path.abspath(__file__))


class CMakeBuild(build_ext):
    """The module is CMake's target objectcache_native: built in OBJECTCACHE_BUILD_DIR when set
    (a tree scripts/build made), else in a Release tree of its own without tests and benchmarks,
    then copied where setuptools packs it."""

    def build_extension(self, ext):
        tree = os.environ.get("OBJECTCACHE_BUILD_DIR") or os.path.join(
            os.path.abspath(self.build_temp), "cmake")
        if not os.path.exists(os.path.join(tree, "CMakeCache.txt")):
            subprocess.run(["cmake", "-S", ROOT, "-B", tree, "-DCMAKE_BUILD_TYPE=Release",
                            "-DOBJECTCACHE_BUILD_TESTS=OFF", "-DOBJECTCACHE_BUILD_BENCH=OFF",
                            f"-DPython3_EXECUTABLE={sys.executable}"], check=True)
        subprocess.run(["cmake", "--build", tree, "--target", "objectcache_native", "-j",
                        str(os.cpu_count() or 1)], check=True)
        built = glob.glob(os.path.join(tree, "python", "objectcache", "_native*.so"))
        if not built:
            raise RuntimeError(f"objectcache: no _native module in {tree}/python/objectcache "
                               "(CMake needs python3-dev and pybind11-dev)")
        target = self.get_ext_fullpath(ext.name)
        os.makedirs(os.path.dirname(target), exist_ok=True)
        shutil.copyfile(built[0], target)


setup(ext_modules=[Extension("objectcache._native", sources=[])],
      cmdclass={"build_ext": CMakeBuild})
