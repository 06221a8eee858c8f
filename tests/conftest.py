import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))


def pytest_configure(config):
    # `make test` runs every test; `-m "not slow"` skips the subprocess-heavy property tests.
    config.addinivalue_line("markers", "slow: subprocess-heavy property tests (still part of `make test`)")
