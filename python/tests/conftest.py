import os
import sys

import pytest

# Tests run against the installed package (pip install ./python or maturin develop).
HERE = os.path.dirname(os.path.abspath(__file__))


@pytest.fixture
def store_path(tmp_path):
    return str(tmp_path / "run.strata")
