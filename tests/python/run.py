"""Runs one test module of the Python package for CTest.

Usage: run.py MODULE [--needs numpy,torch]. Where the module cannot run here it prints
cmocka's "[  SKIPPED ]" marker, which CTest's SKIP_REGULAR_EXPRESSION turns into a skip,
and says why: a sanitizer build (STRATA_TEST_SANITIZE: python cannot load an instrumented
libstrata without preloading the sanitizer's runtime), or a module it needs missing.
"""
import argparse
import importlib
import os
import sys
import unittest


def skip(reason):
    print(f"[  SKIPPED ] {reason}")
    sys.exit(0)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("module")
    parser.add_argument("--needs", default="numpy")
    args = parser.parse_args()
    sanitize = os.environ.get("STRATA_TEST_SANITIZE", "")
    if sanitize not in ("", "none", "OFF"):
        skip(f"libstrata is built with STRATA_SANITIZE={sanitize}: python cannot load it "
             f"unless the sanitizer's runtime is preloaded")
    for needed in filter(None, args.needs.split(",")):
        try:
            importlib.import_module(needed)
        except ImportError as err:
            skip(f"{args.module} needs {needed}, which {sys.executable} cannot import ({err}); "
                 f"scripts/setup.sh installs python3-{needed}")
    suite = unittest.defaultTestLoader.loadTestsFromName(args.module)
    result = unittest.TextTestRunner(verbosity=2, stream=sys.stdout).run(suite)
    if result.wasSuccessful() and result.testsRun > 0 and len(result.skipped) == result.testsRun:
        skip(f"every test of {args.module} skipped: {result.skipped[0][1]}")
    sys.exit(0 if result.wasSuccessful() else 1)


if __name__ == "__main__":
    main()
