"""Shared fixtures: paths of the repository's examples, the seed's data."""
import os
import pathlib

import numpy as np
import pytest

REPO = pathlib.Path(__file__).resolve().parents[2]
EXAMPLES = REPO / "examples"


@pytest.fixture
def examples():
    return EXAMPLES


@pytest.fixture
def rng():
    return np.random.default_rng(1234567890)


def nabla_bin():
    return os.environ.get("NABLA_BIN")
