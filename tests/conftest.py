import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))


def pytest_configure(config):
    # `make test` runs every test; `-m "not slow"` skips the subprocess-heavy property tests.
    config.addinivalue_line("markers", "slow: subprocess-heavy property tests (still part of `make test`)")


# The object view of `plan`/`diff` pulls the chart when it is not in the cache: never in tests
# (tests that render the chart pass --chart-dir or point a repository at 127.0.0.1).
import os  # noqa: E402

os.environ.setdefault("GPU_STACK_CHART_PULL", "off")
