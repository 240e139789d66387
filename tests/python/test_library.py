"""How the package finds libstrata: STRATA_LIBRARY_PATH as the file or as a directory
holding libstrata.so*, else the dynamic loader's path; an error naming both otherwise.

STRATA_LIBRARY_PATH of the test run names the library that was built (a file).
"""
import ctypes.util
import os
import subprocess
import sys
import tempfile
import unittest

import strata
from strata import LIBRARY_ENV, LibraryNotFoundError, library_path, open_library

BUILT = os.environ[LIBRARY_ENV]
PYTHON_DIR = os.path.dirname(os.path.dirname(strata.__file__))


def load_in_child(env):
    """Run `import strata; strata.version()` in a fresh interpreter with env."""
    return subprocess.run([sys.executable, "-c", "import strata; print(strata.version())"],
                          env={"PYTHONPATH": PYTHON_DIR, "PATH": os.environ["PATH"], **env},
                          capture_output=True, text=True, timeout=60)


class TestLibraryPath(unittest.TestCase):
    def test_variable_names_the_file(self):
        self.assertEqual(library_path({LIBRARY_ENV: BUILT}), BUILT)
        lib = open_library({LIBRARY_ENV: BUILT})
        self.assertEqual(lib.strata_get_version_string().decode(), strata.version())

    def test_variable_names_a_directory_with_the_soname(self):
        with tempfile.TemporaryDirectory() as d:
            os.symlink(os.path.abspath(BUILT), os.path.join(d, "libstrata.so.0.1.0"))
            os.symlink("libstrata.so.0.1.0", os.path.join(d, "libstrata.so.0"))
            os.symlink("libstrata.so.0", os.path.join(d, "libstrata.so"))
            self.assertEqual(library_path({LIBRARY_ENV: d}), os.path.join(d, "libstrata.so.0"))
            self.assertTrue(open_library({LIBRARY_ENV: d}).strata_get_version_string())

    def test_variable_names_a_directory_with_only_the_versioned_file(self):
        with tempfile.TemporaryDirectory() as d:
            os.symlink(os.path.abspath(BUILT), os.path.join(d, "libstrata.so.0.1.0"))
            self.assertEqual(library_path({LIBRARY_ENV: d}),
                             os.path.join(d, "libstrata.so.0.1.0"))

    def test_variable_names_a_directory_with_only_the_development_link(self):
        with tempfile.TemporaryDirectory() as d:
            os.symlink(os.path.abspath(BUILT), os.path.join(d, "libstrata.so"))
            self.assertEqual(library_path({LIBRARY_ENV: d}), os.path.join(d, "libstrata.so"))

    def test_unset_or_empty_leaves_it_to_the_loader(self):
        self.assertIsNone(library_path({}))
        self.assertIsNone(library_path({LIBRARY_ENV: ""}))

    def test_bad_path(self):
        with self.assertRaisesRegex(LibraryNotFoundError,
                                    f"{LIBRARY_ENV}=/no/such/libstrata.so: no such file"):
            library_path({LIBRARY_ENV: "/no/such/libstrata.so"})

    def test_directory_without_the_library(self):
        with tempfile.TemporaryDirectory() as d:
            with self.assertRaisesRegex(LibraryNotFoundError,
                                        f"{LIBRARY_ENV}={d} is a directory without libstrata"):
                open_library({LIBRARY_ENV: d})

    def test_file_that_is_not_a_library(self):
        with tempfile.NamedTemporaryFile(suffix=".so") as f:
            f.write(b"not an ELF file")
            f.flush()
            with self.assertRaisesRegex(LibraryNotFoundError,
                                        f"{LIBRARY_ENV}: cannot load {f.name}"):
                open_library({LIBRARY_ENV: f.name})

    def test_loader_path(self):
        """Unset: the loader finds libstrata.so.0 on LD_LIBRARY_PATH."""
        with tempfile.TemporaryDirectory() as d:
            os.symlink(os.path.abspath(BUILT), os.path.join(d, "libstrata.so.0"))
            child = load_in_child({"LD_LIBRARY_PATH": d})
            self.assertEqual(child.returncode, 0, child.stderr)
            self.assertEqual(child.stdout.strip(), strata.version())

    def test_not_found_names_both_ways(self):
        if ctypes.util.find_library("strata"):
            self.skipTest("a libstrata is installed where the loader looks")
        child = load_in_child({})
        self.assertNotEqual(child.returncode, 0)
        self.assertIn("LibraryNotFoundError", child.stderr)
        self.assertIn(f"{LIBRARY_ENV} is unset and the dynamic loader's path", child.stderr)


if __name__ == "__main__":
    unittest.main()
