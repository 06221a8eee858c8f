"""The real device plugin v0.18.1 on an H200 with the stack's own configs (the committed run,
docs/gpu-runs/device-plugin-h200.txt, made by tests/deviceplugin/gpu_run.py), and the stand-in
kubelet that run used.

The run is checked twice: that the plugin answered as the stack predicts (resource name, device
count of the capacity table, Allocate as the CDI setting implies, MPS and one-replica limits),
and that the stack of today still generates exactly the configs and environments that were run;
a change of the generated sharing config that the run does not cover fails here until the run is
made again.
"""

from __future__ import annotations

import os
import threading
from concurrent import futures
from pathlib import Path

import pytest
import yaml

from gpu_stack.offline.runner import PROJECT_DIR
from tests.deviceplugin import cases, record, stubs
from tests.helpers import plan_stack_file

RUN = PROJECT_DIR / "docs" / "gpu-runs" / "device-plugin-h200.txt"
PLUGIN_VERSION = "0.18.1"
CDI_KIND = "k8s.device-plugin.nvidia.com/gpu"
"""The CDI kind the plugin names the devices it hands out with (its own spec)."""


@pytest.fixture(scope="module")
def run() -> record.Record:
    return record.parse(RUN.read_text())


@pytest.fixture(scope="module")
def results(run):
    return {r["case"]["name"]: r for r in run.results}


def test_every_case_was_run_once_on_an_h200_left_as_found(run):
    assert [r["case"]["name"] for r in run.results] == [c.name for c in cases.CASES]
    assert run.gpu_before.startswith("NVIDIA H200, ")
    assert run.gpu_before.endswith(", Default, Disabled"), "compute mode Default and MIG off before the run"
    assert run.gpu_after.split(" (")[0] == run.gpu_before, "the run changed the GPU's compute or MIG mode"


@pytest.mark.parametrize("case", cases.CASES, ids=lambda c: c.name)
def test_the_stack_still_generates_what_was_run(case, results):
    ran = results[case.name]["case"]
    today = cases.build(case)
    for key in ("changes", "key", "config", "env", "expect", "configmap"):
        assert today[key] == ran[key], f"{case.name}: {key} differs from the run; run the plugin on a GPU again (tests/deviceplugin/gpu_run.py)"


def test_the_dev_case_is_the_dev_stacks_own_configmap(results):
    plan = plan_stack_file("dev")
    values = next(r for r in plan.resources if r.type == "kubernetes:helm.sh/v3:Release").inputs["values"]
    name = values["devicePlugin"]["config"]["name"]
    (configmap,) = [r for r in plan.resources if r.inputs.get("metadata", {}).get("name") == name]
    dev = results["dev"]["case"]
    assert dev["configmap"] == name
    assert configmap.inputs["data"][values["devicePlugin"]["config"]["default"]] == dev["config"]
    assert cases.plugin_env(values) == dev["env"]


@pytest.mark.parametrize("case", cases.CASES, ids=lambda c: c.name)
def test_the_plugin_registered_and_advertised_what_the_capacity_table_predicts(case, results):
    ran, obs = results[case.name]["case"], results[case.name]["observed"]
    expect = ran["expect"]
    assert "error" not in obs, f"{case.name}: {obs.get('error')}; plugin said: {obs.get('plugin_log')}"
    assert obs["refused_by_kubelet"] == []
    assert obs["registered"]["version"] == "v1beta1"
    assert obs["registered"]["resource_name"] == expect["resource"]
    assert obs["registered"]["endpoint"] == f"nvidia-{expect['resource'].split('/', 1)[1]}.sock"
    adv = obs["advertised"]
    assert adv["count"] == expect["count"] == adv["healthy"] == adv["distinct_ids"]
    assert len(adv["gpu_uuids"]) == 1 and expect["gpus"] == "1x H200"


@pytest.mark.parametrize("case", cases.CASES, ids=lambda c: c.name)
def test_allocate_answers_as_the_cdi_and_mps_settings_imply(case, results):
    ran, obs = results[case.name]["case"], results[case.name]["observed"]
    expect, answer = ran["expect"], obs["allocate"]
    (uuid,) = obs["advertised"]["gpu_uuids"]
    assert obs["preferred"][0].startswith(f"{uuid}::")
    envs = answer.get("envs", {})
    if expect["cdi"]:
        assert answer["cdi_devices"] == [{"name": f"{CDI_KIND}={uuid}"}]
        (annotation,) = answer["annotations"].items()
        assert annotation[0].startswith(ran["env"]["CDI_ANNOTATION_PREFIX"]) and annotation[1] == f"{CDI_KIND}={uuid}"
        assert "NVIDIA_VISIBLE_DEVICES" not in envs, "CDI only: the runtime must not see the device list as env"
        assert [f"{CDI_KIND}={uuid}"] in obs["plugin_cdi_spec"].values(), "the plugin's own CDI spec names what it hands out"
    else:
        assert "cdi_devices" not in answer and "annotations" not in answer
        assert envs["NVIDIA_VISIBLE_DEVICES"] == uuid
    resource = expect["resource"]
    if expect["mps"]:
        assert obs["mps_daemon"]["ready"] and obs["mps_daemon_exit"] == 0
        assert (obs["compute_mode_during"], obs["compute_mode_after"]) == ("Exclusive_Process", "Default")
        assert envs["CUDA_MPS_PIPE_DIRECTORY"] == f"/mps/{resource}/pipe"
        root = ran["env"]["MPS_ROOT"]
        assert {(m["container_path"], m["host_path"]) for m in answer["mounts"]} == {
            (f"/mps/{resource}/pipe", f"{root}/{resource}/pipe"),
            ("/dev/shm", f"{root}/shm"),
        }
    else:
        assert "CUDA_MPS_PIPE_DIRECTORY" not in envs and "mounts" not in answer


@pytest.mark.parametrize("case", cases.CASES, ids=lambda c: c.name)
def test_a_request_for_two_replicas_fails_exactly_when_the_config_says(case, results):
    ran, obs = results[case.name]["case"], results[case.name]["observed"]
    if ran["expect"]["one_at_most"]:
        assert "maximum request size for shared resources is 1" in obs["allocate_two"]["refused"]
    else:
        assert "granted" in obs["allocate_two"], obs["allocate_two"]


@pytest.mark.parametrize("case", [c for c in cases.CASES if c.changes.get("sharing.mode") == "mps" or "profiles" in str(c.changes)], ids=lambda c: c.name)
def test_the_mps_daemon_gives_each_replica_its_share_of_threads_and_memory(case, run, results):
    ran, obs = results[case.name]["case"], results[case.name]["observed"]
    (resource,) = yaml.safe_load(ran["config"])["sharing"]["mps"]["resources"]
    replicas = resource["replicas"]
    total_mib = int(run.gpu_before.split(", ")[2].removesuffix(" MiB"))
    limits = obs["mps_limits"]
    assert float(limits["get_default_active_thread_percentage"]) == 100 // replicas
    # the daemon sets total/R in MiB; the control tool prints it in whole GiB, rounded down
    assert limits["get_default_device_pinned_mem_limit 0"] == f"{total_mib // replicas // 1024}G"


def test_the_node_scripts_cdi_spec_names_the_gpu_the_plugin_hands_out(run):
    script = (PROJECT_DIR / "config" / "node-scripts" / "node-prep.sh").read_text()
    assert 'nvidia-ctk cdi generate "--output=$spec"' in script and "local spec=$ROOT/var/run/cdi/nvidia.yaml" in script, (
        "the node script no longer runs the command the GPU run ran"
    )
    assert run.cdi["rc"] == 0, run.cdi["log"]
    handed_out = {u for r in run.results for u in r["observed"]["advertised"]["gpu_uuids"]}
    assert handed_out and {f"nvidia.com/gpu={u}" for u in handed_out} <= set(run.cdi["devices"])
    assert {"nvidia.com/gpu=0", "nvidia.com/gpu=all"} <= set(run.cdi["devices"])


def test_the_record_renders_from_its_own_data(run):
    assert record.render(run) == RUN.read_text()


# --------------------------------------------------------------------------- the stand-in kubelet


@pytest.fixture(scope="module")
def stubs_dir(tmp_path_factory) -> Path:
    try:
        proto = stubs.api_proto(PLUGIN_VERSION)
    except stubs.ProtoMissing as err:
        if os.environ.get("CI") == "true":
            pytest.fail(f"CI builds the device plugin first: {err}")
        pytest.skip(str(err))
    return stubs.generate(proto, tmp_path_factory.mktemp("stubs"))


def test_the_stubs_come_from_the_kubelet_the_plugin_is_built_against(stubs_dir):
    pb, _grpc_mod = stubs.load(stubs_dir)
    assert pb.DESCRIPTOR.package == "v1beta1"
    assert {s.full_name for s in pb.DESCRIPTOR.services_by_name.values()} == {"v1beta1.Registration", "v1beta1.DevicePlugin"}
    assert "cdi_devices" in pb.ContainerAllocateResponse.DESCRIPTOR.fields_by_name


@pytest.mark.parametrize(
    "name, problem",
    [
        ("nvidia.com/gpu", None),
        ("nvidia.com/gpu.shared", None),
        ("nvidia.com/mig-1g.18gb", None),
        ("gpu", "not of the form"),
        ("kubernetes.io/gpu", "reserved prefix"),
        ("nvidia.com/" + "g" * 64, "not a qualified name"),
        ("nvidia.com/gpu.", "not a qualified name"),
    ],
)
def test_the_stand_in_checks_resource_names_as_the_kubelet_does(name, problem):
    from tests.deviceplugin.kubelet_standin import resource_name_problem

    found = resource_name_problem(name)
    assert (found is None) if problem is None else (problem in found)


def test_the_stand_in_kubelet_registers_a_plugin_and_reads_what_it_offers(stubs_dir, tmp_path):
    import grpc

    from tests.deviceplugin.kubelet_standin import StandInKubelet

    pb, grpc_mod = stubs.load(stubs_dir)

    class FakePlugin(grpc_mod.DevicePluginServicer):
        def GetDevicePluginOptions(self, request, context):
            return pb.DevicePluginOptions(get_preferred_allocation_available=True)

        def ListAndWatch(self, request, context):
            yield pb.ListAndWatchResponse(devices=[pb.Device(ID=f"GPU-a::{i}", health="Healthy") for i in range(3)])
            threading.Event().wait(10)

        def GetPreferredAllocation(self, request, context):
            return pb.PreferredAllocationResponse(container_responses=[pb.ContainerPreferredAllocationResponse(deviceIDs=["GPU-a::1"])])

        def Allocate(self, request, context):
            ids = list(request.container_requests[0].devices_ids)
            if len(ids) > 1:
                context.abort(grpc.StatusCode.UNKNOWN, "maximum request size for shared resources is 1")
            return pb.AllocateResponse(container_responses=[pb.ContainerAllocateResponse(envs={"NVIDIA_VISIBLE_DEVICES": ids[0]})])

    kubelet = StandInKubelet(tmp_path / "device-plugins", stubs_dir)
    kubelet.start()
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=4))
    grpc_mod.add_DevicePluginServicer_to_server(FakePlugin(), server)
    server.add_insecure_port(f"unix://{kubelet.dir / 'fake.sock'}")
    server.start()
    try:
        with grpc.insecure_channel(f"unix://{kubelet.socket}") as channel:
            registration = grpc_mod.RegistrationStub(channel)
            with pytest.raises(grpc.RpcError) as refused:
                registration.Register(pb.RegisterRequest(version="v1alpha", endpoint="fake.sock", resource_name="nvidia.com/gpu"), timeout=10)
            assert "unsupported API version" in refused.value.details()
            registration.Register(pb.RegisterRequest(version="v1beta1", endpoint="fake.sock", resource_name="nvidia.com/gpu.shared"), timeout=10)
        seen = kubelet.exercise(kubelet.wait_registration(10), timeout=10)
    finally:
        kubelet.stop()
        server.stop(grace=None)
    assert seen["registered"]["resource_name"] == "nvidia.com/gpu.shared"
    assert [d["ID"] for d in seen["devices"]] == ["GPU-a::0", "GPU-a::1", "GPU-a::2"]
    assert seen["preferred"] == ["GPU-a::1"]
    assert seen["allocate"] == {"envs": {"NVIDIA_VISIBLE_DEVICES": "GPU-a::1"}}
    assert "maximum request size" in seen["allocate_two"]["refused"]
    assert len(kubelet.refused) == 1 and not kubelet.socket.exists()
