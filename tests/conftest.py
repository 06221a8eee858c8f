import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

# The object view of `plan`/`diff` pulls the chart when it is not in the cache: never in tests
# (tests that render the chart pass --chart-dir or point a repository at 127.0.0.1).
import os  # noqa: E402

os.environ.setdefault("GPU_STACK_CHART_PULL", "off")
