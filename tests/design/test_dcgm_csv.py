"""The metrics CSV read as dcgm-exporter 4.4.2-4.7.0 reads it (Go encoding/csv with Comment '#',
then counters/counter_config.go), the field-name list, and the DCGM Job on an all-MIG cluster."""

from __future__ import annotations

import pytest

from gpu_stack.config.dcgm_csv import FIELDS_PATH, csv_errors, go_csv_records, known_fields
from gpu_stack.design.derive import derive

from ..helpers import dev_config, plan_of, plan_stack_file, require_reference, set_path
from .test_validation_payloads import dcgm_env, exporter, run, stubs  # noqa: F401 - fixtures

UTIL = "DCGM_FI_DEV_GPU_UTIL, gauge, GPU utilization (in %).\n"

# (label, csv, the message the check gives): each one is an error for the exporter as well.
GO_CSV_REJECTIONS = [
    ("whitespace-only line", UTIL + "   \nDCGM_FI_DEV_FB_USED, gauge, FB used\n",
     ("line 2: 1 fields, need exactly 3: FIELD, type, help (the exporter's CSV reader stops here: wrong number of fields, "
     "the first record has 3); a line of only spaces is a record to the exporter: make it empty")),
    ("comment not in column 0", UTIL + "  # memory\n", "line 2: 1 fields, need exactly 3: FIELD, type, help"),
    ("indented comment hint", UTIL + "  # memory\n", "'#' starts a comment only in the first column"),
    ("bare quote", 'DCGM_FI_DEV_GPU_UTIL, gauge, the "util"\n', 'line 1: bare " in non-quoted field'),
    ("space before the opening quote", 'DCGM_FI_DEV_GPU_UTIL, gauge, "GPU use, in %"\n', 'line 1: bare " in non-quoted field'),
    ("text after the closing quote", 'DCGM_FI_DEV_GPU_UTIL,gauge,"GPU use" in %\n', 'line 1: extraneous or missing " in quoted-field'),
    ("quote never closed", UTIL + 'DCGM_FI_DEV_FB_USED,gauge,"FB used\n', 'line 2: extraneous or missing " in quoted-field'),
    ("unknown DCGM_FI name", "DCGM_FI_DEV_GPU_UTILIZATION, gauge, util\n",
     "line 1: 'DCGM_FI_DEV_GPU_UTILIZATION' is not a DCGM field name dcgm-exporter knows"),
    ("unknown exporter field", "DCGM_EXP_XID_COUNT, gauge, xids\n", "line 1: 'DCGM_EXP_XID_COUNT' is not a DCGM field name"),
    ("tab before the type (only spaces are trimmed)", "DCGM_FI_DEV_GPU_UTIL,\tgauge, util\n", "line 1: type '\\tgauge' must be one of"),
    ("first record sets the field count", "DCGM_FI_DEV_GPU_UTIL, gauge\n" + UTIL, "line 2: 3 fields, need exactly 3"),
]


@pytest.mark.parametrize("label,csv,message", GO_CSV_REJECTIONS, ids=[c[0] for c in GO_CSV_REJECTIONS])
def test_what_the_exporter_refuses_is_refused_naming_the_line(label, csv, message):
    errors = csv_errors(csv)
    assert errors and any(message in e for e in errors), errors


GO_CSV_ACCEPTED = [
    ("quoted help with a comma", 'DCGM_FI_DEV_GPU_UTIL,gauge,"GPU use, in %"\n', [["DCGM_FI_DEV_GPU_UTIL", "gauge", "GPU use, in %"]]),
    ("doubled quote inside quotes", 'DCGM_FI_DEV_GPU_UTIL,gauge,"the ""util"""\n', [["DCGM_FI_DEV_GPU_UTIL", "gauge", 'the "util"']]),
    ("quoted help over two lines", 'DCGM_FI_DEV_GPU_UTIL,gauge,"GPU\nuse"\n', [["DCGM_FI_DEV_GPU_UTIL", "gauge", "GPU\nuse"]]),
    ("CRLF line ends and empty lines", "# c\r\n\r\n" + UTIL.replace("\n", "\r\n"), [["DCGM_FI_DEV_GPU_UTIL", " gauge", " GPU utilization (in %)."]]),
    ("exporter fields", "DCGM_EXP_XID_ERRORS_COUNT, gauge, XIDs\nDCGM_EXP_GPU_HEALTH_STATUS, gauge, health\n", None),
    ("legacy field name", "dcgm_sm_clock, gauge, SM clock\n", None),
]


@pytest.mark.parametrize("label,csv,records", GO_CSV_ACCEPTED, ids=[c[0] for c in GO_CSV_ACCEPTED])
def test_what_the_exporter_accepts_is_accepted(label, csv, records):
    assert csv_errors(csv) == []
    if records is not None:
        assert [fields for _, fields in go_csv_records(csv)] == records


def test_the_field_list_is_data_with_its_source_and_covers_nvidias_lists():
    text = FIELDS_PATH.read_text()
    assert FIELDS_PATH.parent.name == "config"
    assert "NVIDIA/go-dcgm pkg/dcgm/const_fields.go" in text and "0b1e78b1ccea" in text
    names = known_fields()
    assert {"DCGM_FI_DEV_GPU_UTIL", "DCGM_FI_DEV_FB_USED", "DCGM_FI_PROF_GR_ENGINE_ACTIVE"} <= names
    assert {"DCGM_EXP_XID_ERRORS_COUNT", "DCGM_EXP_CLOCK_EVENTS_COUNT", "DCGM_EXP_GPU_HEALTH_STATUS", "DCGM_EXP_P2P_STATUS"} <= names
    assert "DCGM_FI_UNKNOWN" not in names and len(names) > 600
    ref = require_reference()
    for name in ("default-counters.csv", "dcp-metrics-included.csv"):
        for _, fields in go_csv_records((ref / name).read_text()):
            assert fields[0].strip() in names, (name, fields[0])


# --------------------------------------------------------------------------- the all-MIG DCGM Job
def _all_mig_config():
    cfg = dev_config()
    cfg["driver"] = {"placement": "operator"}
    cfg["toolkit"] = {"placement": "operator"}
    cfg["nodes"] = [
        {"name": "gpu-a", "gpu": {"model": "H100-80GB", "count": 8}, "mig": "inference"},
        {"name": "gpu-b", "gpu": {"model": "H100-80GB", "count": 4}, "mig": "inference"},
    ]
    cfg["sharing"] = {"mode": "none"}
    cfg["mig"] = {"strategy": "mixed", "profiles": {"inference": [
        {"devices": "all", "mig-enabled": True, "mig-devices": {"1g.10gb": 2, "2g.20gb": 1, "3g.40gb": 1}},
    ]}}
    return cfg


def _dcgm_env(plan) -> dict[str, str]:
    job = plan.by_name("validation-dcgm-metrics")
    (container,) = job.inputs["spec"]["template"]["spec"]["containers"]
    return {e["name"]: e["value"] for e in container["env"]}


def test_all_mig_cluster_checks_a_metric_mig_gpus_report():
    env = _dcgm_env(plan_of(_all_mig_config()))
    assert env["METRIC"] == "DCGM_FI_DEV_FB_USED"  # MIG GPUs report no DCGM_FI_DEV_GPU_UTIL
    assert env["EXPECTED_GPUS"] == "12"


def test_whole_gpu_stacks_keep_utilisation():
    for stack in ("dev", "staging"):
        assert _dcgm_env(plan_stack_file(stack))["METRIC"] == "DCGM_FI_DEV_GPU_UTIL"


def test_all_mig_custom_list_without_fb_used_checks_another_listed_metric():
    from gpu_stack.config import load_settings

    cfg = _all_mig_config()
    cfg["ssh"] = {"user": "root"}
    cfg.setdefault("dcgmExporter", {})["metrics"] = UTIL + "DCGM_FI_PROF_DRAM_ACTIVE, gauge, DRAM active\n"
    s = load_settings(cfg)
    (job,) = [j for j in derive(s).validation.jobs if j.check == "dcgm-metrics"]
    assert job.validates["metric"] == "DCGM_FI_PROF_DRAM_ACTIVE" and job.validates["expected_gpus"] == 12


def _mig_metrics(node: str, gpus: list[str]) -> str:
    lines = ["# HELP DCGM_FI_DEV_FB_USED Framebuffer memory used (in MiB).", "# TYPE DCGM_FI_DEV_FB_USED gauge"]
    for i, uuid in enumerate(gpus):
        for gi, profile in ((1, "1g.10gb"), (2, "1g.10gb"), (3, "3g.40gb")):
            lines.append(
                f'DCGM_FI_DEV_FB_USED{{gpu="{i}",UUID="{uuid}",device="nvidia{i}",modelName="NVIDIA H100 80GB HBM3",'
                f'GPU_I_PROFILE="{profile}",GPU_I_ID="{gi}",Hostname="{node}"}} 13'
            )
    return "\n".join(lines) + "\n"


def test_dcgm_payload_counts_mig_gpus_once_by_parent_uuid(stubs, exporter):  # noqa: F811
    exporter.bodies = [_mig_metrics("gpu-a", ["GPU-a", "GPU-b"])]
    status, out, _ = run(stubs, "dcgm-metrics.sh", dcgm_env(exporter, EXPECTED_GPUS=2, DEADLINE_SECONDS=0, METRIC="DCGM_FI_DEV_FB_USED"))
    assert status == 0, out
    assert "DCGM_FI_DEV_FB_USED reported for 2 GPU(s)" in out
    exporter.bodies = [_mig_metrics("gpu-a", ["GPU-a"])]
    status, out, _ = run(stubs, "dcgm-metrics.sh", dcgm_env(exporter, EXPECTED_GPUS=2, DEADLINE_SECONDS=0, METRIC="DCGM_FI_DEV_GPU_UTIL"))
    assert status != 0 and "serves no DCGM_FI_DEV_GPU_UTIL" in out


def test_a_bad_csv_in_the_stack_registers_nothing():
    from ..helpers import assert_refused

    assert_refused(
        set_path(dev_config(), "dcgmExporter.metrics", UTIL + "  # indented\n"),
        "gpu-stack:dcgmExporter.metrics: invalid metrics CSV: line 2: 1 fields, need exactly 3",
    )
