"""The compiled part of `stateflow` for `pip install .` (pyproject.toml holds
the rest): built by the project's CMake, not by setuptools' compiler."""
import os
import shutil
import subprocess
import sys

from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext

SOURCE = os.path.abspath(os.path.dirname(__file__))


class CMakeBuild(build_ext):
    """Builds the target _stateflow in the project's build tree and copies it."""

    def build_extension(self, ext):
        build = os.environ.get("SF_BUILD_DIR")
        if not build:
            configured = os.path.join(SOURCE, "build")
            build = (configured if os.path.isfile(os.path.join(configured, "CMakeCache.txt"))
                     else os.path.join(SOURCE, "build-python"))
        if not os.path.isfile(os.path.join(build, "CMakeCache.txt")):
            subprocess.check_call([
                "cmake", "-S", SOURCE, "-B", build, "-DCMAKE_BUILD_TYPE=Release",
                "-DSF_BUILD_TESTS=OFF", "-DSF_BUILD_BENCHMARKS=OFF", "-DSF_CUDA=OFF",
                "-DSF_PYTHON=ON", "-DPython3_EXECUTABLE=" + sys.executable])
        subprocess.check_call(["cmake", "--build", build, "--target", "_stateflow",
                               "-j", str(os.cpu_count() or 2)])
        built = os.path.join(build, "python", "stateflow")
        modules = [f for f in os.listdir(built) if f.startswith("_stateflow") and f.endswith(".so")]
        if len(modules) != 1:
            raise RuntimeError("expected one _stateflow*.so in %s, found %s" % (built, modules))
        target = self.get_ext_fullpath(ext.name)
        os.makedirs(os.path.dirname(target), exist_ok=True)
        shutil.copyfile(os.path.join(built, modules[0]), target)


setup(ext_modules=[Extension("stateflow._stateflow", sources=[])],
      cmdclass={"build_ext": CMakeBuild},
      # setuptools' own build folder, away from CMake's build/.
      options={"build": {"build_base": "build-pip"}})
