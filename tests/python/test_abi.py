"""The ctypes mirrors of strata.h against what a C compiler says of the header.

abi_layout (tests/python/abi_layout.c, path in STRATA_TEST_ABI_LAYOUT) prints every
mirrored struct's size, each field's offset and size, and the enums' values.
"""
import ctypes
import os
import subprocess
import unittest

from strata import _library, _types as t


def c_layout():
    lines = subprocess.run([os.environ["STRATA_TEST_ABI_LAYOUT"]], check=True, timeout=30,
                           capture_output=True, text=True).stdout.splitlines()
    structs, fields, consts = {}, {}, {}
    for line in lines:
        kind, *rest = line.split()
        if kind == "struct":
            structs[rest[0]] = int(rest[1])
        elif kind == "field":
            fields.setdefault(rest[0], []).append((rest[1], int(rest[2]), int(rest[3])))
        elif kind == "const":
            consts[rest[0]] = int(rest[1])
    return structs, fields, consts


# Python enum, and the prefix of its members' C names.
ENUMS = [
    (t.Status, ""),
    (t.Dtype, "STRATA_DTYPE_"),
    (t.LogLevel, "STRATA_LOG_LEVEL_"),
    (t.ConfigField, "STRATA_CONFIG_FIELD_"),
    (t.Route, "STRATA_MOE_ROUTE_"),
    (t.Mode, "STRATA_MOE_MODE_"),
    (t.Combine, "STRATA_MOE_COMBINE_"),
    (t.Exchange, "STRATA_MOE_EXCHANGE_"),
    (t.Phase, "STRATA_MOE_PHASE_"),
]


class TestAbi(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.structs, cls.fields, cls.consts = c_layout()

    def test_every_struct_is_mirrored(self):
        self.assertEqual(set(self.structs), set(t.STRUCTS))

    def test_struct_sizes(self):
        for name, mirror in t.STRUCTS.items():
            with self.subTest(struct=name):
                self.assertEqual(ctypes.sizeof(mirror), self.structs[name])

    def test_fields_in_order_at_their_offsets(self):
        for name, mirror in t.STRUCTS.items():
            with self.subTest(struct=name):
                ours = [(f[0], getattr(mirror, f[0]).offset, getattr(mirror, f[0]).size)
                        for f in mirror._fields_]
                self.assertEqual(ours, self.fields[name])

    def test_enum_values(self):
        for enum, prefix in ENUMS:
            c_names = {n[len(prefix):]: v for n, v in self.consts.items()
                       if n.startswith(prefix or "STRATA_ERR_") or
                       (not prefix and n in ("STRATA_OK", "STRATA_INPROGRESS"))}
            if enum is t.Phase:
                c_names.pop("S", None)  # STRATA_MOE_PHASES, the count
            with self.subTest(enum=enum.__name__):
                self.assertEqual({m.name: int(m) for m in enum}, c_names)

    def test_counts_and_version(self):
        self.assertEqual(t.MOE_PHASES, self.consts["STRATA_MOE_PHASES"])
        self.assertEqual(_library.MIRRORED_VERSION,
                         (self.consts["STRATA_VERSION_MAJOR"], self.consts["STRATA_VERSION_MINOR"]))


if __name__ == "__main__":
    unittest.main()
