"""A communicator of one rank for the tests: no launcher variables, so a world of one."""
import os
import unittest

import strata

LAUNCHER_VARIABLES = ("OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE", "PMI_RANK", "PMI_SIZE",
                      "RANK", "WORLD_SIZE", "SLURM_PROCID", "SLURM_NTASKS")


def communicator():
    for name in LAUNCHER_VARIABLES:
        os.environ.pop(name, None)
    os.environ.setdefault("STRATA_INTER_PROVIDER", "tcp")
    os.environ.setdefault("STRATA_INTER_IFACE", "lo")
    return strata.Communicator()


class CommTestCase(unittest.TestCase):
    """Tests sharing one such communicator, cls.comm, closed after the class's tests."""

    @classmethod
    def setUpClass(cls):
        cls.comm = communicator()

    @classmethod
    def tearDownClass(cls):
        cls.comm.close()
