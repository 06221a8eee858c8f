"""The sandbox's stand-ins refuse what the real components refuse, and bring a node up and reconfigure
its MIG layout in the order and with the states the real ones do (sandbox/gpu_nodes.py)."""

from __future__ import annotations

import json
import subprocess

import pytest
import yaml

from sandbox.gpu_nodes import (
    DEPLOY,
    MIG_CONFIG,
    MIG_STATE,
    PAUSED_FOR_MIG,
    UNCHANGED,
    WAITING,
    BringUp,
    Hardware,
    NodeAgents,
    gpu_product,
    mig_layout,
    node_manifest,
    plugin_config,
)


def test_the_device_plugin_stand_in_refuses_a_config_key_the_configmap_lacks():
    # E18: the real config-manager fails ("specified config %v does not exist") and the plugin
    # never starts; the stand-in must not fall back to whole GPUs.
    data = {"default": "version: v1\n", "ts-4": "version: v1\nsharing: {}\n"}
    assert plugin_config(data, "default", None) == ("version: v1\n", None)
    assert plugin_config(data, "default", "ts-4") == ("version: v1\nsharing: {}\n", None)
    assert plugin_config(data, "default", "ts-8") == (None, "specified config ts-8 does not exist")
    assert plugin_config(data, "gone", None) == (None, "specified config gone does not exist")
    assert plugin_config(None, "default", "ts-8") == (None, None)  # no ConfigMap: the built-in config


def test_the_sandbox_gpu_table_is_the_programs_catalog():
    # E17: every catalog model that is MIG-capable is MIG-capable in the sandbox (prod's H200 was
    # not, so its MIG manager never started), named as GFD names it.
    from gpu_stack.config.gpu_models import catalog

    for model in catalog().models:
        product, memory, mig = gpu_product(model.name)
        assert mig == model.mig_capable, model.name
        assert memory == model.memory_gb * 1024 and " " not in product
    assert gpu_product("H200-141GB") == ("NVIDIA-H200", 141 * 1024, True)


# --------------------------------------------------------------------------- bring-up and MIG manager
# NodeAgents against an in-memory API: nodes, pods of the MIG manager DaemonSet (a pod per node that
# carries its nodeSelector label, a new uid when deleted), ConfigMaps and the ClusterPolicy; every
# label call is recorded in order, so the states a node passes through within one pass are seen.
PARTED = """version: v1
mig-configs:
  all-disabled:
  - devices: all
    mig-enabled: false
  inference:
  - device-filter: ["0x20B210DE"]
    devices: all
    mig-enabled: true
    mig-devices: {"1g.10gb": 7}
  - device-filter: ["0x233510DE", "0x233B10DE"]
    devices: all
    mig-enabled: true
    mig-devices: {"1g.18gb": 2, "2g.35gb": 1, "3g.71gb": 1}
  a100-only:
  - device-filter: "0x20B210DE"
    devices: all
    mig-enabled: true
    mig-devices: {"7g.80gb": 1}
"""


class FakeApi:
    def __init__(self, hardware: list[Hardware]):
        self.nodes = {hw.name: node_manifest(hw) for hw in hardware}
        self.policy: dict | None = None
        self.configmaps: dict[str, dict] = {"mig-parted": {"config.yaml": PARTED}}
        self.daemonset: dict | None = None
        self.generation: dict[str, int] = {}
        self.label_calls: list[tuple[str, dict[str, str]]] = []
        self.logs_objects: list[dict] = []

    @staticmethod
    def _done(stdout: str = "", code: int = 0) -> subprocess.CompletedProcess:
        return subprocess.CompletedProcess([], code, stdout, "")

    def labels(self, node: str) -> dict[str, str]:
        return self.nodes[node]["metadata"]["labels"]

    def advertised(self, node: str) -> dict[str, str]:
        return {k: v for k, v in self.nodes[node]["status"]["allocatable"].items() if k.startswith("nvidia.com/")}

    def restart_manager(self, node: str) -> None:
        self.generation[node] = self.generation.get(node, 0) + 1

    def _pods(self) -> list[dict]:
        if self.daemonset is None:
            return []
        selector = self.daemonset["spec"]["template"]["spec"]["nodeSelector"]
        spec = self.daemonset["spec"]["template"]["spec"]
        out = []
        for name, node in self.nodes.items():
            if all(node["metadata"]["labels"].get(k) == v for k, v in selector.items()):
                gen = self.generation.get(name, 0)
                out.append({"metadata": {"name": f"nvidia-mig-manager-{name}-{gen}", "uid": f"{name}-{gen}",
                                         "labels": {"app": "nvidia-mig-manager"}},
                            "spec": {**spec, "nodeName": name}, "status": {"phase": "Running"}})
        return out

    def read(self, path: str, label_selector: str | None = None, **_):
        """What the API server answers the agents' GETs (Cluster.read), copies as over the wire."""
        if path == "/api/v1/nodes":
            return {"items": json.loads(json.dumps(list(self.nodes.values())))}
        if path == "/api/v1/pods":
            return {"items": self._pods()}
        if path == "/apis/nvidia.com/v1/clusterpolicies":
            return {"items": [{"spec": self.policy}] if self.policy else []}
        if path == "/api/v1/namespaces/gpu-operator/configmaps":
            return {"items": [{"metadata": {"name": k}, "data": v} for k, v in self.configmaps.items()]}
        raise AssertionError(f"unexpected GET {path}")

    def apply(self, manifest: dict) -> None:
        if manifest["kind"] == "DaemonSet":
            self.daemonset = manifest

    def kubectl(self, *args: str, input: str | None = None, check: bool = True, **_):
        if args[:2] == ("apply", "-f"):
            self.logs_objects.append(yaml.safe_load(input or ""))
            return self._done()
        if args[:2] == ("label", "node"):
            changes = dict(a.split("=", 1) for a in args[4:])
            self.label_calls.append((args[2], changes))
            self.labels(args[2]).update(changes)
            return self._done()
        if args[:2] == ("patch", "node") and "--subresource=status" in args:
            status = json.loads(args[-1])["status"]
            for part in ("capacity", "allocatable"):
                have = self.nodes[args[2]]["status"][part]
                for k, v in status[part].items():
                    if v is None:
                        have.pop(k, None)
                    else:
                        have[k] = v
            return self._done()
        raise AssertionError(f"unexpected kubectl {args}")


def policy(driver: bool = True, default: str = "all-disabled") -> dict:
    return {"driver": {"enabled": driver}, "mig": {"strategy": "mixed"},
            "migManager": {"enabled": True, "config": {"name": "mig-parted", "default": default}},
            "devicePlugin": {"config": {}}}


class Clock:
    def __init__(self):
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def world(tmp_path):
    hardware = [Hardware("h200", "H200-141GB", 8), Hardware("l4", "L4", 2)]
    api = FakeApi(hardware)
    clock = Clock()
    agents = NodeAgents(api, hardware, bring_up=BringUp(300, 60), log_dir=tmp_path, clock=clock)  # type: ignore[arg-type]
    return api, agents, clock


def settle(agents: NodeAgents, passes: int = 3) -> None:
    for _ in range(passes):
        agents.sync()


def test_no_gfd_label_and_no_gpu_until_the_driver_is_ready(world):
    api, agents, clock = world
    assert "nvidia.com/gpu.product" not in api.labels("h200") and "nvidia.com/gpu.present" not in api.labels("h200")
    api.policy = policy(driver=True)
    settle(agents)
    clock.now += 299
    settle(agents)
    labels = api.labels("h200")
    # the operator labels at once from NFD's PCI label; GFD, the plugin and the MIG manager wait
    assert labels["nvidia.com/gpu.present"] == "true" and labels[DEPLOY + "device-plugin"] == "true"
    assert not any(k in labels for k in ("nvidia.com/gpu.product", "nvidia.com/mig.capable", DEPLOY + "mig-manager", MIG_CONFIG))
    assert api.advertised("h200") == {} and api.advertised("l4") == {} and agents.managers == {}
    clock.now += 1
    settle(agents)
    labels = api.labels("h200")
    assert labels["nvidia.com/gpu.product"] == "NVIDIA-H200" and labels["nvidia.com/gpu.count"] == "8"
    assert labels["nvidia.com/mig.capable"] == "true" and labels[DEPLOY + "mig-manager"] == "true"
    # the operator's default on a MIG-capable node without a MIG config; the MIG manager finds it applied
    assert labels[MIG_CONFIG] == "all-disabled" and labels[MIG_STATE] == "success"
    assert api.advertised("h200") == {"nvidia.com/gpu": "8"} and api.advertised("l4") == {"nvidia.com/gpu": "2"}
    l4 = api.labels("l4")
    assert l4["nvidia.com/mig.capable"] == "false" and MIG_CONFIG not in l4 and DEPLOY + "mig-manager" not in l4
    # GFD's labels came after the operator's deploy labels, the MIG manager's label after GFD's
    order = [k for _, changes in api.label_calls for k in changes]
    assert order.index(DEPLOY + "gpu-feature-discovery") < order.index("nvidia.com/gpu.product") < order.index(DEPLOY + "mig-manager")


def test_the_bring_up_is_shorter_with_the_driver_on_the_host(world):
    api, agents, clock = world
    api.policy = policy(driver=False)
    settle(agents)
    clock.now += 60
    settle(agents)
    assert api.advertised("l4") == {"nvidia.com/gpu": "2"}


def test_no_mig_config_default_unless_the_policy_names_all_disabled(world):
    api, agents, clock = world
    api.policy = policy(default="")
    settle(agents)
    clock.now += 300
    settle(agents)
    assert MIG_CONFIG not in api.labels("h200") and api.labels("h200")[DEPLOY + "mig-manager"] == "true"


def ready(world) -> tuple:
    api, agents, clock = world
    api.policy = policy()
    settle(agents)
    clock.now += 300
    settle(agents)
    api.label_calls.clear()
    return api, agents


def test_a_mig_change_sets_pending_pauses_the_operands_and_returns_them_with_success(world):
    api, agents = ready(world)
    api.labels("h200")[MIG_CONFIG] = "inference"
    settle(agents)
    states = [c[MIG_STATE] for _, c in api.label_calls if MIG_STATE in c]
    assert states == ["pending", "success"]
    paused = next(c for _, c in api.label_calls if DEPLOY + "device-plugin" in c)
    assert {k: paused[DEPLOY + k] for k in ("device-plugin", "gpu-feature-discovery", "dcgm-exporter", "dcgm")} == dict.fromkeys(
        ("device-plugin", "gpu-feature-discovery", "dcgm-exporter", "dcgm"), PAUSED_FOR_MIG)
    assert api.labels("h200")[DEPLOY + "device-plugin"] == "true" and api.labels("h200")[DEPLOY + "dcgm-exporter"] == "true"
    # device-filter: only the H200 entry applies on an H200
    assert api.advertised("h200") == {"nvidia.com/mig-1g.18gb": "16", "nvidia.com/mig-2g.35gb": "8", "nvidia.com/mig-3g.71gb": "8"}


def test_a_profile_whose_device_filter_excludes_the_gpu_changes_nothing(world):
    api, agents = ready(world)
    api.labels("h200")[MIG_CONFIG] = "a100-only"
    settle(agents)
    assert api.labels("h200")[MIG_STATE] == "success" and api.advertised("h200") == {"nvidia.com/gpu": "8"}
    (manager,) = agents.managers.values()
    assert "Selected MIG config is already applied" in "\n".join(manager.lines)


def test_device_filter_is_matched_as_mig_parted_matches_it():
    assert mig_layout(PARTED, "inference", 8, "0x233510de") == {"1g.18gb": 16, "2g.35gb": 8, "3g.71gb": 8}
    assert mig_layout(PARTED, "inference", 2, "0x20B210DE") == {"1g.10gb": 14}
    assert mig_layout(PARTED, "inference", 2, "0x26B510DE") == UNCHANGED
    assert mig_layout(PARTED, "all-disabled", 2, "0x26B510DE") is None
    with pytest.raises(KeyError):
        mig_layout(PARTED, "missing", 2, "0x233510DE")


@pytest.mark.parametrize("mode", ["pending", "rebooting"])
def test_a_manager_that_gives_up_leaves_the_state_and_the_operands_paused_and_waits_for_the_label(world, mode):
    api, agents = ready(world)
    agents.give_up["h200"] = mode
    api.labels("h200")[MIG_CONFIG] = "inference"
    settle(agents)
    labels = api.labels("h200")
    assert labels[MIG_STATE] == mode
    assert labels[DEPLOY + "device-plugin"] == PAUSED_FOR_MIG and labels[DEPLOY + "gpu-feature-discovery"] == PAUSED_FOR_MIG
    assert api.advertised("h200") == {}, "a paused device plugin advertises nothing"
    (manager,) = agents.managers.values()
    assert manager.lines[-1].endswith(f'msg="{WAITING}"')
    log = "\n".join(manager.lines)
    if mode == "pending":
        assert 'level=error msg="Error: failed to wait for pods to be deleted: device-plugin pod did not shutdown' in log
    else:
        assert "Failed to reboot the node" in log and "level=error" not in log
    # its log file is what kwok serves (CRI lines), named by a Logs object of the pod
    assert manager.log_file.read_text().splitlines()[-1].split(" ", 3)[1:3] == ["stderr", "F"]
    assert agents.give_up == {}, "it gives up once"
    settle(agents)
    assert api.labels("h200")[MIG_STATE] == mode, "it waits for a change of the label"
    api.restart_manager("h200")  # what the rollout does with a manager that gave up
    settle(agents)
    labels = api.labels("h200")
    assert labels[MIG_STATE] == "success" and labels[DEPLOY + "device-plugin"] == "true"
    assert api.advertised("h200")["nvidia.com/mig-3g.71gb"] == "8"
    assert [o["metadata"]["name"] for o in api.logs_objects] == [m.name for m in agents.managers.values()]


def test_a_gpu_that_refuses_the_layout_fails_and_returns_the_operands(world):
    api, agents = ready(world)
    agents.fail_mig_profiles.add("inference")
    api.labels("h200")[MIG_CONFIG] = "inference"
    settle(agents)
    labels = api.labels("h200")
    assert labels[MIG_STATE] == "failed" and labels[DEPLOY + "device-plugin"] == "true"
    (manager,) = agents.managers.values()
    assert 'Error: failed to apply MIG configuration' in "\n".join(manager.lines)


def test_the_programs_default_waits_cover_a_realistic_bring_up():
    # On a first install the MIG rollout waits for the MIG manager pod (it starts only after GFD's
    # labels) and the validation Jobs for the advertised GPUs: their defaults must outlast the
    # slower bring-up (the operator's driver); prod's e2e runs the host driver's at these defaults.
    from gpu_stack.config.mig import MigRolloutSettings
    from gpu_stack.config.validation import ValidationSettings

    slowest = BringUp().operator_driver_seconds
    assert MigRolloutSettings().manager_timeout > slowest
    assert ValidationSettings().timeout_seconds > slowest
