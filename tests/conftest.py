import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

# Two tiers. `make test` (and CI) runs every test; `make test-quick` runs `-m "not slow"`: the
# pure tests on the design and a few end-to-end plans, in seconds. A test is quick only when its
# module is listed here and the test itself is not listed as slow: a new module starts in the slow
# tier, so the quick tier never grows a subprocess, git, shell, promtool, containerd or sshd run
# by accident.
QUICK_MODULES = frozenset({
    "test_capacity.py", "test_config_docs.py", "test_design.py", "test_dashboard.py", "test_dcgm.py", "test_dcgm_csv.py", "test_docs_links.py",
    "test_footprint.py", "test_foundation.py", "test_golden.py", "test_layering.py", "test_offline_layout.py", "test_plan_schema.py", "test_mig.py", "test_mig_rollout.py",
    "test_real_engine.py", "test_replace_rules.py", "test_runner_inputs.py", "test_runtime_values.py", "test_safety.py",
    "test_sharing.py", "test_sharing_advice.py", "test_upgrades.py", "test_validation_jobs.py", "test_sandbox_compare.py",
    "test_config_walk.py", "test_component_plans.py", "test_thin_components.py", "test_stack_outputs.py",
})
SLOW_IN_QUICK_MODULES = frozenset({
    "test_footprint.py::test_make_bench_reports_pods_and_gpu_replicas_at_each_size",
    "test_foundation.py::test_plan_json_follows_the_contract",
    "test_foundation.py::test_bad_config_cli_exits_nonzero_without_traceback",
    "test_mig_rollout.py::test_done_when_prod_moves_a_node_to_inference_balanced",
    "test_real_engine.py::test_the_plan_json_is_the_same_under_any_hash_seed",
    "test_real_engine.py::test_a_node_missing_from_the_cluster_fails_before_its_patch_is_registered",
    "test_real_engine.py::test_a_job_name_covers_labels_and_annotations_too",
    "test_dashboard.py::test_every_dashboard_query_parses_in_promtool",
    "test_dcgm_csv.py::test_dcgm_payload_counts_mig_gpus_once_by_parent_uuid",
    "test_sharing_advice.py::test_cli_advises_from_a_results_file_with_the_prod_nodes_config_lines",
    "test_sharing_advice.py::test_cli_reads_the_stack_output_through_the_pulumi_cli",
    "test_sharing_advice.py::test_cli_refusals_say_what_to_do",
})


def pytest_configure(config):
    config.addinivalue_line(
        "markers", "slow: subprocesses, git, real binaries or many examples (still part of `make test`)"
    )
    config.addinivalue_line(
        "markers",
        "reference_data(*folders): needs these files of the reference folder (`make reference`); "
        "skipped without them, failed under CI=true",
    )


def pytest_runtest_setup(item):
    from tests.helpers import require_reference

    for mark in item.iter_markers("reference_data"):
        for rel in mark.args:
            require_reference(rel)


def pytest_collection_modifyitems(config, items):
    for item in items:
        module = item.path.name
        test = f"{module}::{item.originalname}"
        if module not in QUICK_MODULES or test in SLOW_IN_QUICK_MODULES:
            item.add_marker(pytest.mark.slow)


# The object view of `plan`/`diff` pulls the chart when it is not in the cache: never in tests
# (tests that render the chart pass --chart-dir or point a repository at 127.0.0.1).
import os  # noqa: E402

os.environ.setdefault("GPU_STACK_CHART_PULL", "off")
