"""Hostile and careless input, round four: image references and mirrors, every image under the
mirror, options that must agree with the validation they plan, the `advise` and `images`
commands, local charts and every file the program reads, credentials anywhere in a URL.

CLI cases run `python -m gpu_stack` as a user would (tests/config/test_hostile_input.py's helpers).
"""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings as hsettings, strategies as st

from gpu_stack.config import ImageSettings, SettingsError, load_settings
from gpu_stack.config.grammars import url_credentials
from gpu_stack.config.rules.images import stack_repositories
from gpu_stack.config.safe_input import redact_url_credentials
from gpu_stack.design.derive import derive
from gpu_stack.design.images import mirror_ref
from gpu_stack.offline.images import plan_images

from ..helpers import dev_config, plan_of, set_path
from .test_hostile_input import assert_clean_refusal, cli, project, stack_yaml

CANARY = "canaryFragmentToken42"


def _plan_refusal(cfg: dict) -> str:
    """Planning `cfg` is refused before anything is registered; the message."""
    from gpu_stack.offline.runner import PlanError

    with pytest.raises(PlanError) as info:
        plan_of(cfg)
    assert info.value.registered == 0
    return str(info.value)


def _refusal(cfg: dict) -> str:
    with pytest.raises(SettingsError) as info:
        load_settings(cfg)
    return str(info.value)


# =========================================================================== 1. image references
def runtime_registry(name: str) -> str:
    """The registry a container runtime pulls an image name from (Docker's normalisation: a first
    part is a registry host only when it holds '.' or ':', is `localhost`, or has an uppercase
    letter; otherwise the image is on Docker Hub)."""
    first, slash, _ = name.partition("/")
    if slash and ("." in first or ":" in first or first == "localhost" or first != first.lower()):
        return first
    return "docker.io"


def _with_images(images: dict) -> dict:
    cfg = dev_config()
    cfg["images"] = images
    return cfg


@pytest.mark.parametrize("mirror", ["myregistry", "myregistry/gpu", "harbor/nvidia", "mirror-1/team"])
def test_a_mirror_that_a_runtime_would_read_as_docker_hub_is_refused(mirror):
    text = _refusal(_with_images({"mirror": mirror}))
    assert f"gpu-stack:images.mirror = {mirror!r}: must begin with a registry host" in text
    assert "docker.io/" in text and "localhost:5000" in text


@pytest.mark.parametrize("target", ["myteam/driver", "driver", "harbor/nvidia/driver"])
def test_an_override_target_that_a_runtime_would_read_as_docker_hub_is_refused(target):
    text = _refusal(_with_images({"overrides": {"nvcr.io/nvidia/driver": target}}))
    assert 'gpu-stack:images.overrides["nvcr.io/nvidia/driver"] = ' in text and "must begin with a registry host" in text


@pytest.mark.parametrize(
    "mirror, message",
    [("localhost:0", "not a TCP port"), ("registry.example.internal:99999", "not a TCP port"),
     ("a" * 64 + ".example.internal", "at most 63 characters"), ("registry.example.internal//gpu", "empty part"),
     ("registry.example.internal/", "empty part"), ("Registry.example.internal", "must be lowercase"),
     ("[fe80::1%eth0]:5000", "zone"), ("registry.example.internal/" + "a" * 250, "limit")],
)
def test_hosts_ports_and_lengths_a_runtime_cannot_use_are_refused_in_a_mirror(mirror, message):
    assert message in _refusal(_with_images({"mirror": mirror}))


@pytest.mark.parametrize("mirror", ["localhost", "localhost:5000", "registry:5000", "10.0.0.5:5000/gpu", "[::1]:5000",
                                    "[2001:db8::1]:443/gpu", "registry.example.internal:65535/a/b"])
def test_registry_hosts_as_runtimes_take_them_are_accepted_and_every_image_stays_on_them(mirror):
    settings = load_settings(_with_images({"mirror": mirror}))
    host = mirror.split("/", 1)[0]
    for repository in stack_repositories(settings):
        assert runtime_registry(mirror_ref(repository + ":1", settings.images)) == host


def _toolbox(cfg: dict, ref: str) -> dict:
    """`ref` as the validation toolbox, declared as an image of the stack's own (images.jobImages)."""
    set_path(cfg, "validation.images.toolbox", ref)
    cfg.setdefault("images", {}).setdefault("jobImages", {})[ref] = {"shell": "bash"}
    return cfg


def test_two_images_that_map_to_one_mirrored_image_with_one_tag_are_refused():
    # nvcr.io/nvidia/cuda:13.0.1-base-ubi9 is the chart's (vfioManager, operator.initContainer)
    cfg = _toolbox(_with_images({"mirror": "registry.example.internal"}), "docker.io/nvidia/cuda:13.0.1-base-ubi9")
    text = _refusal(cfg)
    assert (
        "maps nvcr.io/nvidia/cuda:13.0.1-base-ubi9 and docker.io/nvidia/cuda:13.0.1-base-ubi9 onto one mirrored image "
        "registry.example.internal/nvidia/cuda:13.0.1-base-ubi9: one copy would hide the other"
    ) in text
    assert "gpu-stack:images.mirror = 'registry.example.internal'" in text
    # the same tag through two overrides, and a tag of the driver's family (the operator appends the OS)
    cfg = _with_images({"overrides": {"nvcr.io/nvidia/k8s-device-plugin": "registry.example.internal/x",
                                      "docker.io/nvidia/tools": "registry.example.internal/x"}})
    assert "onto one mirrored image registry.example.internal/x:v0.18.1" in _refusal(_toolbox(cfg, "docker.io/nvidia/tools:v0.18.1"))
    cfg = _with_images({"overrides": {"nvcr.io/nvidia/driver": "registry.example.internal/x",
                                      "docker.io/nvidia/tools": "registry.example.internal/x"}})
    set_path(cfg, "driver", {"placement": "operator"})
    text = _refusal(_toolbox(cfg, "docker.io/nvidia/tools:580.105.08-ubuntu22.04"))
    assert "onto one mirrored image registry.example.internal/x:580.105.08-<os>" in text


def test_two_images_that_map_to_one_mirrored_repository_with_distinct_tags_plan():
    """Issue 41 item 12: distinct tags live side by side in one repository, so nothing is hidden;
    the cluster pulls each by its own tag from the one mirrored repository."""
    cfg = _toolbox(_with_images({"mirror": "registry.example.internal"}), "docker.io/nvidia/cuda:12.5.0-base-ubuntu22.04")
    settings = load_settings(cfg)
    assert mirror_ref(settings.validation.images.toolbox, settings.images) == "registry.example.internal/nvidia/cuda:12.5.0-base-ubuntu22.04"
    overrides = {"nvcr.io/nvidia/driver": "registry.example.internal/x", "nvcr.io/nvidia/k8s/container-toolkit": "registry.example.internal/x"}
    settings = load_settings(_with_images({"overrides": overrides}))
    assert mirror_ref("nvcr.io/nvidia/k8s/container-toolkit:v1.18.1", settings.images) == "registry.example.internal/x:v1.18.1"
    plan = plan_of(_with_images({"overrides": overrides}))
    assert plan.resources
    # a digest reference is pulled by its content: no tag of another image can hide it
    cfg = _toolbox(_with_images({"mirror": "registry.example.internal"}), "docker.io/nvidia/cuda@sha256:" + "a" * 64)
    assert load_settings(cfg).images.mirror == "registry.example.internal"


def test_a_mirror_under_which_image_names_pass_the_name_limit_is_refused():
    mirror = "registry.example.internal/" + "/".join(["p" * 50] * 4)
    text = _refusal(_with_images({"mirror": mirror}))
    assert "longer than the 255 characters" in text and "gpu-stack:images.mirror" in text


_HOSTISH = st.one_of(
    st.from_regex(r"[a-z][a-z0-9-]{0,12}[a-z0-9]", fullmatch=True),
    st.from_regex(r"[a-z0-9]{1,8}(\.[a-z0-9]{1,8}){1,3}", fullmatch=True),
    st.from_regex(r"[a-z0-9]{1,8}:[0-9]{1,6}", fullmatch=True),
    st.sampled_from(["localhost", "LOCALHOST", "Registry", "[::1]", "[::1]:5000", "_x", "x_y.z"]),
)
_PATHISH = st.lists(st.from_regex(r"[a-z0-9]{1,6}([._-][a-z0-9]{1,4})?", fullmatch=True), max_size=3)


@hsettings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(host=_HOSTISH, path=_PATHISH)
def test_property_an_accepted_mirror_keeps_every_image_on_its_registry_within_the_name_limit(host, path):
    mirror = "/".join([host, *path])
    try:
        images = ImageSettings(mirror=mirror)
    except ValueError:
        return
    assert runtime_registry(mirror + "/x") == host
    settings = load_settings(_with_images({"mirror": mirror}))
    for repository in stack_repositories(settings):
        mirrored = mirror_ref(repository, images)
        assert runtime_registry(mirrored) == host and len(mirrored) <= 255


@hsettings(max_examples=200, deadline=None)
@given(host=_HOSTISH, path=_PATHISH)
def test_property_an_accepted_override_target_is_pulled_from_the_registry_it_names(host, path):
    target = "/".join([host, *path, "driver"])
    try:
        images = ImageSettings(overrides={"nvcr.io/nvidia/driver": target})
    except ValueError:
        return
    assert runtime_registry(mirror_ref("nvcr.io/nvidia/driver:1", images)) == host


# =========================================================================== 2. every image follows the mirror
MIRROR = "registry.example.internal:5000/gpu"


@pytest.mark.parametrize("stack", ["dev", "prod"])
def test_every_image_of_every_job_with_every_optional_feature_on_is_under_the_mirror(stack):
    from gpu_stack.config.stack_files import read_stack
    from gpu_stack.offline.runner import PROJECT_DIR

    cfg = read_stack(PROJECT_DIR, stack).namespace()
    set_path(cfg, "validation.sharingBenchmark.enabled", True)
    set_path(cfg, "dcgmExporter.serviceMonitor.enabled", True)
    set_path(cfg, "alerts.enabled", True)
    cfg["images"] = {"mirror": MIRROR}
    doc = plan_of(cfg).to_json()
    uses = plan_images(doc)
    jobs = {u.source.split("/", 1)[1].rsplit("-", 1)[0] for u in uses}
    from ..helpers import helm_sdk_problem, reference_dir

    chart = reference_dir() / "chart"
    if (chart / "Chart.yaml").exists() and helm_sdk_problem() is None:
        # The chart's objects too, every ClusterPolicy component whether switched on or not.
        from gpu_stack.offline.images import release_images
        from gpu_stack.offline.objects import release_renderer

        render = release_renderer(chart)
        for r in doc["resources"]:
            if r["type"] == "kubernetes:helm.sh/v3:Release":
                uses += release_images(render(r["inputs"]), ("ubuntu22.04",))
        assert any(not u.runs for u in uses) and any(u.source.startswith("Deployment") for u in uses)
    if stack == "dev":
        assert {"sharing-bench-gpu-dev-1", "sharing-cost"} <= jobs, jobs
    else:
        assert {"mig-rollout", "node-labels", "mig-layout-guard"} <= jobs, jobs
    outside = sorted({f"{u.source}: {u.image}" for u in uses if not u.image.startswith(MIRROR + "/")})
    assert outside == []


def test_the_benchmark_image_can_be_overridden_like_every_other_image():
    cfg = _with_images({"overrides": {"nvcr.io/nvidia/k8s/cuda-sample": "registry.example.internal/samples/cuda"}})
    set_path(cfg, "validation.sharingBenchmark.enabled", True)
    images = {u.image for u in plan_images(plan_of(cfg).to_json())}
    assert "registry.example.internal/samples/cuda:nbody-cuda11.6.0-ubuntu18.04" in images


# =========================================================================== 3. options and validation agree
def _job_checks(cfg: dict) -> tuple[set[str], tuple[str, ...]]:
    plan = derive(load_settings(cfg)).validation
    assert plan is not None
    return {j.check for j in plan.jobs}, plan.notes


def test_a_toolkit_that_gives_unrequested_gpus_by_choice_plans_no_check_that_would_fail_every_up():
    checks, notes = _job_checks(dev_config())
    assert "no-gpu" in checks
    for placement in ("operator", "host"):
        cfg = set_path(dev_config(), "toolkit.acceptEnvvarWhenUnprivileged", True)
        cfg["toolkit"]["placement"] = placement
        checks, notes = _job_checks(cfg)
        assert "no-gpu" not in checks, placement
        assert any("acceptEnvvarWhenUnprivileged is true" in n and "no-GPU check is not planned" in n for n in notes)


# =========================================================================== 5. images --driver-os
@pytest.mark.parametrize(
    "value",
    ["ubuntu22.04\nevil.example/x:1 registry.example.internal/x", "../../etc/passwd", "ubuntu22.04 --all",
     "-rf", "", "ubuntu22.04;id", "UBUNTU22.04", "ubuntu22.04\r", "rhel", "ubuntu2204"],
)
def test_a_driver_os_that_is_not_an_os_tag_is_refused_before_anything_is_printed(tmp_path, value):
    proc = cli(project(tmp_path, stack_yaml(dev_config())), "images", "--stack", "t", "--format", "copy", f"--driver-os={value}")
    err = assert_clean_refusal(proc, "--driver-os", "is not an OS tag of the driver image")
    assert len(err.splitlines()) == 1


@pytest.mark.parametrize("value", ["ubuntu20.04", "ubuntu22.04", "ubuntu24.04", "rhel8.10", "rhel9.6", "rhcos4.18", "sles15.6"])
def test_the_os_tags_the_operator_builds_are_accepted(value):
    from gpu_stack.config.images import driver_os_tag

    assert driver_os_tag(value) == value


# =========================================================================== 8. credentials anywhere in a URL
@pytest.mark.parametrize(
    "url",
    [f"https://charts.example.internal/nvidia#token={CANARY}", f"https://charts.example.internal/nvidia#access_token={CANARY}",
     f"oci://registry.example.internal/charts#x-amz-signature={CANARY}"],
)
def test_a_token_in_a_repository_urls_fragment_is_refused_and_hidden(url):
    assert url_credentials(url) is not None
    text = _refusal(set_path(dev_config(), "operator.repository", url))
    assert "gpu-stack:operator.repository = " in text and "carries credentials (a fragment (#" in text
    assert CANARY not in text and "#[hidden]" in text


def test_a_fragment_without_a_token_is_still_refused_in_a_repository_url_and_hidden():
    text = _refusal(set_path(dev_config(), "operator.repository", f"https://charts.example.internal/nvidia#{CANARY}"))
    assert "without a fragment" in text and CANARY not in text


def test_a_url_with_a_user_and_a_query_token_hides_both():
    shown = redact_url_credentials(f"'https://robot:{CANARY}@charts.example.internal/x?token={CANARY}#sig={CANARY}'")
    assert CANARY not in shown and "[credentials hidden]" in shown and "?[hidden]" in shown


# =========================================================================== 4. advise
def _advise_cli(tmp_path, *args: str, pulumi_prints: str | None = None, timeout: int = 60):
    import os
    import subprocess
    import sys

    from gpu_stack.offline.runner import PROJECT_DIR

    env = dict(os.environ)
    if pulumi_prints is not None:
        bin_dir = tmp_path / "bin"
        bin_dir.mkdir(exist_ok=True)
        (bin_dir / "out.json").write_text(pulumi_prints)
        fake = bin_dir / "pulumi"
        fake.write_text(f"#!/bin/sh\ncat '{bin_dir / 'out.json'}'\n")
        fake.chmod(0o755)
        env["PATH"] = f"{bin_dir}:{env['PATH']}"
    return subprocess.run(
        [sys.executable, "-m", "gpu_stack", "advise", "--stack", "dev", *args], cwd=PROJECT_DIR, env=env,
        capture_output=True, text=True, errors="replace", timeout=timeout,
    )


def _result(**over: object) -> str:
    fields = {"gpu": "L4", "mode": "time-slicing", "replicas": 2, "k": 1, "pod": 0, "size": "small", "bodies": 4096,
              "batches": 5, "rate": 1000, "p50_us": 10, "p99_us": 12}
    fields.update(over)
    return "RESULT " + " ".join(f"{k}={v}" for k, v in fields.items())


GOOD_LOG = "\n".join([_result(), _result(k=2, pod=0, rate=900), _result(k=2, pod=1, rate=900)]) + "\n"


def _assert_one_clean_line(proc, *needles: str) -> str:
    import re

    assert proc.returncode == 2, (proc.returncode, proc.stdout[-500:], proc.stderr[-2000:])
    assert proc.stdout == "" and "Traceback" not in proc.stderr
    assert len(proc.stderr.splitlines()) == 1, proc.stderr
    assert not re.search(r"[\x00-\x09\x0b-\x1f\x7f\u2028\u2029\u202e]", proc.stderr), repr(proc.stderr)
    for needle in needles:
        assert needle in proc.stderr, proc.stderr
    return proc.stderr


def test_the_good_log_is_advised(tmp_path):
    log = tmp_path / "r.log"
    log.write_text(GOOD_LOG)
    proc = _advise_cli(tmp_path, "--results", str(log))
    assert proc.returncode == 0, proc.stderr


@pytest.mark.parametrize("option", ["--memory-gib", "--max-slowdown", "--tolerance", "--gpu-memory-gib"])
@pytest.mark.parametrize("value", ["nan", "inf", "-inf", "1e999", "-1", "0", "\u0661\u0662", "1_0", "12abc", "\x1b[31m5"])
def test_a_number_option_that_is_not_a_finite_number_in_range_is_one_line(tmp_path, option, value):
    if option == "--tolerance" and value == "0":
        return  # a tolerance of 0 is a strict best
    log = tmp_path / "r.log"
    log.write_text(GOOD_LOG)
    goal = {"--memory-gib": "memory", "--max-slowdown": "latency"}.get(option, "throughput")
    proc = _advise_cli(tmp_path, "--results", str(log), "--goal", goal, f"{option}={value}",
                       *(["--memory-gib=8"] if goal == "memory" and option != "--memory-gib" else []))
    _assert_one_clean_line(proc, f"error: {option} ", "must be")


@pytest.mark.parametrize(
    "line, wanted",
    [
        (_result(rate=0), "rate=0 bodies=4096 is impossible"),
        (_result(rate="9" * 5000), "is not ASCII digits"),
        (_result(rate="\u0661\u0662\u0663"), "is not ASCII digits"),
        (_result(replicas=10**9, k=1), "is impossible"),
        (_result(p50_us="NaN"), "is not ASCII digits"),
        (_result(gpu="L4\x1b[2J"), "is not"),
        (_result(bodies=0), "is impossible"),
        (_result(p50_us=0, p99_us=0), "p50_us=0 p99_us=0 is impossible"),
        (_result(p50_us=10, p99_us=5), "is impossible"),
        ("MEMORY gpu=L4 mode=mps replicas=2 pod=0 asked_mib=9 share_mib=0 result=refused", "share_mib=0 is impossible"),
    ],
)
def test_a_results_log_with_impossible_numbers_is_one_line(tmp_path, line, wanted):
    log = tmp_path / "r.log"
    log.write_text(GOOD_LOG + line + "\n")
    _assert_one_clean_line(_advise_cli(tmp_path, "--results", str(log)), wanted)


def _table(**row_over: object) -> dict:
    row = {"replicas": 2, "size": "small", "bodies": 4096, "k": 1, "pods": 1, "interactionsPerSecond": 1000,
           "p50Us": 10, "p99Us": 12}
    row2 = {**row, "k": 2, "pods": 2, "interactionsPerSecond": 1800}
    return {"L4": {"time-slicing": [{**row, **row_over}, row2]}}


@pytest.mark.parametrize(
    "output, wanted",
    [
        (('{"L4": {"time-slicing": [{"replicas": 2, "size": "small", "bodies": 4096, "k": 1, "pods": 1, '
         '"interactionsPerSecond": NaN, "p50Us": 10, "p99Us": 12}]}}'), "no JSON"),
        (('{"L4": {"time-slicing": [{"replicas": 2, "size": "small", "bodies": 4096, "k": 1, "pods": 1, '
         '"interactionsPerSecond": Infinity, "p50Us": 10, "p99Us": 12}]}}'), "no JSON"),
        (_table(interactionsPerSecond=0), "impossible"),
        (_table(interactionsPerSecond=-5), "is not ASCII digits"),
        (_table(interactionsPerSecond=1.5), "is not ASCII digits"),
        (_table(interactionsPerSecond=True), "is not ASCII digits"),
        (_table(pods=10**9, k=1), "pods=1000000000 k=1"),
        (_table(pods=10**9, k=10**9, replicas=10**9), "impossible"),
        (_table(size="small\nRESULT"), "size="),
        ({"L4 ; rm -rf ~ #": _table()["L4"]}, "gpu="),
        ({"L4\x1b]0;owned\x07": _table()["L4"]}, "gpu="),
        ({"L4": {"exclusive": _table()["L4"]["time-slicing"]}}, "mode="),
        ({"L4": {"time-slicing": ["x"]}}, "is not a mapping"),
        ({"L4": "x"}, "is not a mapping of modes"),
        ([1, 2], "not a mapping of GPU models"),
    ],
)
def test_the_stack_output_is_checked_exactly_like_log_lines(tmp_path, output, wanted):
    import json

    text = output if isinstance(output, str) else json.dumps(output)
    proc = _advise_cli(tmp_path, pulumi_prints=text)
    err = _assert_one_clean_line(proc, wanted)
    assert "rm -rf" not in proc.stdout and "pulumi config set" not in err


def test_a_good_stack_output_with_a_dotted_gpu_name_gives_config_lines_with_one_path_part(tmp_path):
    from gpu_stack.design.advise import profile_key

    assert profile_key("H100.80GB_sxm", "mps", 4) == "h100-80gb-sxm-mps4"
    assert len(profile_key("A" * 64, "time-slicing", 1024)) <= 63


def test_work_is_bounded_in_sizes_and_pods(tmp_path):
    import time

    log = tmp_path / "r.log"
    many_sizes = "\n".join(_result(size="s" + chr(97 + i % 26) * (1 + i // 26)) for i in range(40))
    log.write_text(GOOD_LOG + many_sizes + "\n")
    _assert_one_clean_line(_advise_cli(tmp_path, "--results", str(log)), "sizes")
    # A row whose pods would be a billion windows is refused before one is made.
    started = time.monotonic()
    _assert_one_clean_line(_advise_cli(tmp_path, pulumi_prints=__import__("json").dumps(_table(pods=10**9, k=10**9, replicas=1024))), "impossible")
    assert time.monotonic() - started < 30


# =========================================================================== 7. every file read like the stack file
@pytest.mark.parametrize("kind", ["fifo", "dev-zero", "folder", "huge"])
def test_a_results_log_that_is_not_a_regular_file_of_a_sane_size_is_refused_at_once(tmp_path, kind):
    import os

    path = tmp_path / "r.log"
    if kind == "fifo":
        os.mkfifo(path)
    elif kind == "dev-zero":
        path.symlink_to("/dev/zero")
    elif kind == "folder":
        path.mkdir()
    else:
        with path.open("wb") as fh:
            fh.truncate(17 * 1024 * 1024)
    proc = _advise_cli(tmp_path, "--results", str(path), timeout=30)
    _assert_one_clean_line(proc, str(path))


# =========================================================================== 6, 7. local charts Helm cannot load
def _chart_copy(tmp_path):
    import shutil

    from ..helpers import CHART_REF, helm_sdk_problem, require_reference

    source = require_reference(CHART_REF)
    if helm_sdk_problem() is not None:
        pytest.skip(f"needs helm-python-sdk: {helm_sdk_problem()}")
    chart = tmp_path / "gpu-operator"
    shutil.copytree(source, chart, symlinks=True)
    return chart


def _plan_with_chart(tmp_path, chart, *args: str, timeout_env: str | None = None, **kw):
    import os

    cfg = set_path(dev_config(), "operator.chartPath", str(chart))
    cfg["operator"].pop("repository", None)
    env = {**os.environ, "GPU_STACK_CHART_PULL": "off", "XDG_CACHE_HOME": str(tmp_path / "cache")}
    env.pop("GPU_STACK_CHART_DIR", None)
    if timeout_env:
        env["GPU_STACK_RENDER_TIMEOUT"] = timeout_env
    return cli(project(tmp_path / "p", stack_yaml(cfg)), "plan", "--stack", "t", *args, env=env, **kw)


def _one_line_error(proc, *needles: str) -> str:
    import re

    assert proc.returncode == 2, (proc.returncode, proc.stdout[-800:], proc.stderr[-2000:])
    assert proc.stdout == "" and "Traceback" not in proc.stderr
    assert not re.search(r"[\x00-\x09\x0b-\x1f\x7f]", proc.stderr.rstrip("\n").replace("\n", "")), repr(proc.stderr)
    for needle in needles:
        assert needle in proc.stderr, proc.stderr
    return proc.stderr


def test_a_local_chart_helm_renders_plans_with_its_objects(tmp_path):
    proc = _plan_with_chart(tmp_path, _chart_copy(tmp_path))
    assert proc.returncode == 0, proc.stderr
    assert "(rendered with Helm)" in proc.stdout


def test_a_template_that_includes_itself_fails_the_plan_with_helms_error(tmp_path):
    chart = _chart_copy(tmp_path)
    (chart / "templates" / "loop.yaml").write_text('{{- define "me" -}}{{ include "me" . }}{{- end -}}\n{{ include "me" . }}\n')
    err = _one_line_error(_plan_with_chart(tmp_path, chart), "release gpu-operator-release", "Helm cannot render the chart")
    assert "not shown" not in err


def test_a_template_that_loops_is_stopped_by_the_time_bound(tmp_path):
    import time

    chart = _chart_copy(tmp_path)
    (chart / "templates" / "spin.yaml").write_text("{{- range $i := until 100000 }}{{ range $j := until 100000 }}{{ end }}{{ end }}\n")
    started = time.monotonic()
    _one_line_error(_plan_with_chart(tmp_path, chart, timeout_env="5"), "did not finish rendering", "within 5 s")
    assert time.monotonic() - started < 120


def test_a_template_that_eats_memory_is_stopped_by_the_memory_bound(tmp_path):
    chart = _chart_copy(tmp_path)
    (chart / "templates" / "eat.yaml").write_text("{{- range $i := until 2000000000 }}{{ $i }}{{ end }}\n")
    _one_line_error(_plan_with_chart(tmp_path, chart, timeout_env="60"), "Helm cannot render the chart", "ran out of memory")


def test_a_broken_subchart_fails_the_plan(tmp_path):
    chart = _chart_copy(tmp_path)
    sub = next((chart / "charts").iterdir())
    target = sub / "Chart.yaml" if sub.is_dir() else sub
    target.write_text("apiVersion: v2\nname: [\n")
    _one_line_error(_plan_with_chart(tmp_path, chart), "error: ")


@pytest.mark.parametrize("where", ["templates/leak.yaml", "files/secret.txt", "charts"])
def test_a_link_out_of_the_chart_is_refused_before_helm_reads_it(tmp_path, where):
    chart = _chart_copy(tmp_path)
    outside = tmp_path / "host-secret.txt"
    outside.write_text("canary-host-file-content\n")
    link = chart / where
    if where == "charts":
        link = chart / "charts" / "elsewhere"
        link.symlink_to(tmp_path, target_is_directory=True)
    else:
        link.parent.mkdir(exist_ok=True)
        link.symlink_to(outside)
        if where.startswith("files"):
            (chart / "templates" / "get.yaml").write_text('kind: ConfigMap\napiVersion: v1\nmetadata: {name: x}\ndata: {x: {{ .Files.Get "files/secret.txt" | quote }}}\n')
    err = _one_line_error(_plan_with_chart(tmp_path, chart), "gpu-stack:operator.chartPath", "outside the chart")
    assert "canary-host-file-content" not in err


@pytest.mark.parametrize("kind", ["fifo-in-chart", "fifo-chart-yaml", "fifo-chart-path"])
def test_a_fifo_in_or_as_the_chart_is_refused_at_once(tmp_path, kind):
    import os

    chart = _chart_copy(tmp_path)
    if kind == "fifo-in-chart":
        os.mkfifo(chart / "templates" / "pipe.yaml")
        target = chart
    elif kind == "fifo-chart-yaml":
        (chart / "Chart.yaml").unlink()
        os.mkfifo(chart / "Chart.yaml")
        target = chart
    else:
        target = tmp_path / "chart.tgz"
        os.mkfifo(target)
    _one_line_error(_plan_with_chart(tmp_path, target),
                    "gpu-stack:operator.chartPath", "FIFO")


def _tgz(path, members):
    import io
    import tarfile

    with tarfile.open(path, "w:gz") as tar:
        for info, data in members:
            tar.addfile(info, io.BytesIO(data) if data is not None else None)
    return path


def _file(name: str, data: bytes):
    import tarfile

    info = tarfile.TarInfo(name)
    info.size = len(data)
    return info, data


CHART_YAML = b"apiVersion: v2\nname: gpu-operator\nversion: v25.10.1\n"


@pytest.mark.parametrize(
    "member, wanted",
    [("../evil.yaml", "outside the chart's folder"), ("/etc/evil.yaml", "outside the chart's folder"),
     ("gpu-operator/../../evil.yaml", "outside the chart's folder"), ("symlink", "a link"), ("device", "a device or FIFO")],
)
def test_a_packaged_chart_with_members_outside_its_folder_links_or_devices_is_refused(tmp_path, member, wanted):
    import tarfile

    members = [_file("gpu-operator/Chart.yaml", CHART_YAML), _file("gpu-operator/charts/node-feature-discovery/Chart.yaml", b"x: 1\n")]
    if member == "symlink":
        info = tarfile.TarInfo("gpu-operator/templates/leak.yaml")
        info.type, info.linkname = tarfile.SYMTYPE, "/etc/passwd"
        members.append((info, None))
    elif member == "device":
        info = tarfile.TarInfo("gpu-operator/templates/zero.yaml")
        info.type, info.devmajor, info.devminor = tarfile.CHRTYPE, 1, 5
        members.append((info, None))
    else:
        members.append(_file(member, b"kind: x\n"))
    archive = _tgz(tmp_path / "c.tgz", members)
    text = _plan_refusal(set_path(dev_config(), "operator.chartPath", str(archive)))
    assert "gpu-stack:operator.chartPath" in text and wanted in text


def test_a_packaged_chart_that_unpacks_past_helms_bound_is_refused_quickly(tmp_path):
    import gzip
    import tarfile
    import time

    archive = tmp_path / "bomb.tgz"
    with gzip.open(archive, "wb", compresslevel=9) as gz, tarfile.open(fileobj=gz, mode="w|") as tar:
        info, data = _file("gpu-operator/Chart.yaml", CHART_YAML)
        tar.addfile(info, __import__("io").BytesIO(data))
        for i in range(30):
            info = tarfile.TarInfo(f"gpu-operator/files/zero{i}")
            info.size = 4 * 1024 * 1024
            tar.addfile(info, __import__("io").BytesIO(bytes(info.size)))
    assert archive.stat().st_size < 3 * 1024 * 1024
    started = time.monotonic()
    text = _plan_refusal(set_path(dev_config(), "operator.chartPath", str(archive)))
    assert "unpacks to more than 100 MiB" in text
    assert time.monotonic() - started < 30


# =========================================================================== beyond: strings that reach a shell, a socket or a path
@pytest.mark.parametrize(
    "key, value, wanted",
    [
        ("operator.repository", "oci://registry.example.internal/charts/gpu-operator", "without the chart's name or a tag"),
        ("operator.repository", "oci://registry.example.internal/charts/gpu-operator:v25.10.1", "without the chart's name or a tag"),
        ("operator.repository", "https://charts.example.internal/nvidia/index.yaml", "not a file in it"),
        ("ssh.agentSocketPath", "/tmp/$(id)/agent.sock", "no shell characters"),
        ("ssh.agentSocketPath", "/tmp/a;b", "no shell characters"),
        ("ssh.agentSocketPath", "/run/../etc/agent", "no '..'"),
        ("ssh.agentSocketPath", "/run/" + "s" * 110, "at most 107 bytes"),
        ("toolkit.packages.gpgKey", "/etc/pki/../../root/key.asc", "no '.' or '..' part"),
    ],
)
def test_strings_that_reach_a_socket_a_path_or_a_chart_reference_are_refused_for_the_right_reason(key, value, wanted):
    cfg = set_path(dev_config(), key, value)
    if key.startswith("toolkit.packages"):
        cfg["toolkit"]["packages"].update(source="mirror", aptUrl="https://apt.example.internal/nvidia")
    if key.startswith("ssh.agent"):
        cfg["ssh"].pop("privateKey", None)
    text = _refusal(cfg)
    assert f"gpu-stack:{key} = " in text and wanted in text


def test_an_agent_socket_path_of_letters_digits_and_dots_is_accepted():
    cfg = set_path(dev_config(), "ssh.agentSocketPath", "/run/user/1000/gnupg/S.gpg-agent.ssh")
    cfg["ssh"].pop("privateKey", None)
    assert load_settings(cfg).ssh.agent_socket_path == "/run/user/1000/gnupg/S.gpg-agent.ssh"


def test_a_colon_in_the_mirror_username_is_refused():
    cfg = _with_images({"mirror": "registry.example.internal", "registryCredentials": {"username": "robot:x", "password": "p"}})
    assert "gpu-stack:images.registryCredentials.username" in _refusal(cfg) and "basic authentication" in _refusal(cfg)


def test_plan_piped_into_head_ends_without_a_traceback(tmp_path):
    import subprocess
    import sys

    from gpu_stack.offline.runner import PROJECT_DIR

    root = project(tmp_path, stack_yaml(dev_config()))
    done = subprocess.run(
        f"{sys.executable} -m gpu_stack --project-dir {root} plan --stack t --format json | head -1",
        shell=True, cwd=PROJECT_DIR, capture_output=True, text=True, timeout=300,
    )
    assert done.stdout == "{\n" and "Traceback" not in done.stderr and "BrokenPipe" not in done.stderr, done.stderr


def test_diff_with_an_empty_base_is_refused_in_one_line():
    from gpu_stack.offline.runner import PROJECT_DIR

    proc = cli(PROJECT_DIR, "diff", "--stack", "dev", "--base", "")
    err = assert_clean_refusal(proc, "--base names no revision")
    assert len(err.splitlines()) == 1


# =========================================================================== beyond: what round three left open
@pytest.mark.parametrize("address, what", [("0.0.0.0", "unspecified"), ("::", "unspecified"), ("224.0.0.251", "multicast"),
                                           ("ff02::1%eth0", "multicast"), ("255.255.255.255", "broadcast")])
def test_an_address_that_can_never_be_an_ssh_target_is_refused(address, what):
    text = _refusal(set_path(dev_config(), "nodes[0].address", address))
    assert f"gpu-stack:nodes[0].address = {address!r}: is the {what}" in text or f"is a {what}" in text


@pytest.mark.parametrize(
    "section, both",
    [("alerts.rules", {"gpuTemperature": {"threshold": 85}, "gpu_temperature": {"threshold": 90}}),
     ("sharing", {"mode": "time-slicing", "replicas": 4, "renameByDefault": True, "rename_by_default": False})],
)
def test_one_setting_under_two_spellings_is_refused_instead_of_one_silently_winning(section, both):
    cfg = dev_config()
    if section == "alerts.rules":
        cfg["alerts"] = {"enabled": True, "rules": both}
    else:
        cfg["sharing"] = both
    text = _refusal(cfg)
    assert f"gpu-stack:{section} = " in text and "twice, also as" in text and "silently ignored" in text


def test_a_tab_before_a_trailing_comment_is_read_as_pulumi_reads_it_and_quoted_or_block_text_keeps_its_tabs(tmp_path):
    from gpu_stack.config.stack_files import read_stack

    (tmp_path / "Pulumi.yaml").write_text("name: gpu-stack\nruntime: python\n")
    (tmp_path / "Pulumi.t.yaml").write_text(
        'config:\n  gpu-stack:sharing:\n    mode: time-slicing\t# why\n    replicas: 4\t \t# four\n'
        '  gpu-stack:note:\n    quoted: "a\t# b"\t# c\n    block: |\n      A\t# kept\n'
    )
    values = read_stack(tmp_path, "t").values
    assert values["gpu-stack:sharing"] == {"mode": "time-slicing", "replicas": 4}
    assert values["gpu-stack:note"] == {"quoted": "a\t# b", "block": "A\t# kept\n"}


@pytest.mark.parametrize("model", ["NVIDIA", "NVIDIA GPU", "Tesla 80GB", "nvidia-gpu"])
def test_a_gpu_model_of_only_vendor_words_which_would_accept_every_gpu_is_refused(model):
    text = _refusal(set_path(dev_config(), "nodes[0].gpu.model", model))
    assert "names no GPU model" in text and "would accept any GPU" in text


@pytest.mark.parametrize("model", ["NVIDIA H100 NVL", "L4", "RTX PRO 6000", "GH200", "A100-SXM4-40GB"])
def test_gpu_models_with_a_model_number_are_accepted(model):
    assert load_settings(set_path(dev_config(), "nodes[0].gpu.model", model)).nodes[0].gpu.model == model


def test_a_chart_dir_whose_chart_yaml_is_a_fifo_is_no_chart_never_waited_on(tmp_path):
    import os

    from gpu_stack.offline.chart import ChartRef, ChartUnavailable, locate_chart

    chart = tmp_path / "chart"
    chart.mkdir()
    os.mkfifo(chart / "Chart.yaml")
    with pytest.raises(ChartUnavailable, match="not a chart folder"):
        locate_chart(ChartRef("https://charts.example.internal", "gpu-operator", "v25.10.1"), chart)


@pytest.mark.parametrize("text, decimal, octal", [("010", "10", "0o10"), ("-0755", "-755", "0o755")])
def test_a_number_with_a_leading_zero_that_pulumi_reads_as_octal_is_refused_saying_how_to_write_it(tmp_path, text, decimal, octal):
    doc = f"config:\n  gpu-stack:sharing:\n    mode: time-slicing\n    replicas: {text}\n"
    proc = cli(project(tmp_path, doc), "plan", "--stack", "t")
    err = assert_clean_refusal(proc, "line 4:", "leading zero", "octal", f"write {decimal} for the decimal number", octal)
    assert len(err.splitlines()) == 1


def test_a_project_folder_without_the_program_is_one_line_not_a_traceback(tmp_path):
    root = project(tmp_path, stack_yaml(dev_config()))
    (root / "__main__.py").unlink()
    assert_clean_refusal(cli(root, "plan", "--stack", "t"), "__main__.py: no such file")


@pytest.mark.parametrize(
    "relabeling, wanted",
    [
        ({"regex": "(a", "sourceLabels": ["x"], "targetLabel": "y"}, "is not a regular expression"),
        ({"regex": "(?=node)", "targetLabel": "y"}, "look-around or a back-reference"),
        ({"regex": "(a)\\1", "targetLabel": "y"}, "look-around or a back-reference"),
        ({"action": "hashmod", "sourceLabels": ["a"], "targetLabel": "shard"}, "hashmod needs modulus"),
        ({"action": "replace", "sourceLabels": ["a"]}, "needs targetLabel"),
        ({"targetLabel": "1node"}, "is not a Prometheus label name"),
        ({"action": "lowercase", "sourceLabels": ["a"], "targetLabel": "node_$1"}, "is not a Prometheus label name"),
        ({"action": "labeldrop", "regex": "x", "targetLabel": "y"}, "takes regex only"),
    ],
)
def test_relabelings_the_prometheus_operator_refuses_are_refused(relabeling, wanted):
    cfg = dev_config()
    cfg["dcgmExporter"] = {"serviceMonitor": {"enabled": True, "relabelings": [relabeling]}}
    text = _refusal(cfg)
    assert "gpu-stack:dcgmExporter.serviceMonitor.relabelings[0]" in text and wanted in text


@pytest.mark.parametrize(
    "relabeling",
    [{"sourceLabels": ["__meta_kubernetes_pod_node_name"], "targetLabel": "node_$1"},
     {"action": "hashmod", "sourceLabels": ["a"], "targetLabel": "shard", "modulus": 4},
     {"action": "labeldrop", "regex": "pod_.*"}, {"action": "keep", "sourceLabels": ["a"], "regex": "x|y"}],
)
def test_relabelings_prometheus_takes_are_accepted(relabeling):
    cfg = dev_config()
    cfg["dcgmExporter"] = {"serviceMonitor": {"enabled": True, "relabelings": [relabeling]}}
    load_settings(cfg)


def test_a_prometheus_rule_over_what_the_api_server_stores_is_refused_before_anything_is_registered():
    cfg = dev_config()
    cfg["alerts"] = {"enabled": True, "labels": {f"team_k{i}": "v" * 60 for i in range(3000)}}
    text = _plan_refusal(cfg)
    assert "gpu-stack:alerts" in text and "PrometheusRule" in text and "over the 1.5 MiB" in text


PYDANTIC_WORDING = ("Input should", "should be", "should have", "validation error", "Value error", "Tuple ", "List ",
                    "Dictionary", "after validation", "pydantic", "Field required", "Traceback", "NoneType")


def test_every_wrong_shape_of_every_key_is_worded_in_the_projects_words():
    from tests.config_walk import config_with, leaves

    wrong = [None, [], {}, [1, 2], {"a": 1}, "x", 3.5, -1, True, "nan", [None] * 40]
    for leaf in leaves():
        for value in wrong:
            try:
                load_settings(config_with(leaf.path, value))
            except SettingsError as exc:
                text = str(exc)
                for phrase in PYDANTIC_WORDING:
                    assert phrase not in text, (leaf.key, value, text)
    for path, value in [(("validation", "sharingBenchmark", "sizes"), []), (("images", "pullSecrets"), {"a": 1})]:
        with pytest.raises(SettingsError) as info:
            load_settings(config_with(path, value))
        assert not any(p in str(info.value) for p in PYDANTIC_WORDING), str(info.value)
