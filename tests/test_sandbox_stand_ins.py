"""The sandbox's stand-ins refuse what the real components refuse (sandbox/gpu_nodes.py)."""

from __future__ import annotations

from sandbox.gpu_nodes import gpu_product, plugin_config


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
