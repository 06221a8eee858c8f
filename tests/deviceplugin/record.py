"""The record of a GPU run (docs/gpu-runs/device-plugin-h200.txt): how gpu_run.py prints it and
how the tests read it back. Readable lines for people; the `RESULT {json}` line of each case and
the `RESULT-CDI {json}` line are the data, and the readable lines are rendered from them.

    python3 -m tests.deviceplugin.record RAW > docs/gpu-runs/device-plugin-h200.txt

re-renders a raw run (e.g. one printed before a rendering change), keeping its data.
"""

from __future__ import annotations

import json
import re
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

GPU_HEADER = "== GPU (name, driver, memory, compute capability, compute mode, MIG mode)"
AFTER = "== GPU after the run: "
NOISE = re.compile(r'msg="Could not locate ')
"""The CDI spec generator's search for optional driver files (X11, Vulkan layers, IMEX, ...)."""


def fold(lines: list[str]) -> list[str]:
    """`lines` with the CDI generator's "Could not locate" warnings folded into one line."""
    kept = [ln for ln in lines if not NOISE.search(ln)]
    dropped = len(lines) - len(kept)
    return kept + ([f'[{dropped} "Could not locate <optional driver file>" warnings of the CDI spec generator folded]'] if dropped else [])


def case_lines(case: dict[str, Any], obs: dict[str, Any]) -> list[str]:
    """The readable lines of one case (obs as gpu_run.summarized makes it)."""
    exp = case["expect"]
    lines = [f"== case {case['name']}: {case['what']}"]
    lines.append(f"stack: dev, nodes replaced by {exp['gpus']}; changes {json.dumps(case['changes'], sort_keys=True)}")
    lines.append(f"config (ConfigMap {case['configmap']}, key {case['key']}):")
    lines += [f"| {ln}" for ln in case["config"].splitlines()]
    lines.append("env: " + " ".join(f"{k}={v}" for k, v in sorted(case["env"].items())))
    if "mps_daemon" in obs:
        lines.append(
            f"mps-control-daemon: ready {obs['mps_daemon']['ready']}, exit {obs.get('mps_daemon_exit')}; "
            f"compute mode while up: {obs.get('compute_mode_during')}, after: {obs.get('compute_mode_after')}"
        )
        lines += [f"  daemon| {ln}" for ln in fold(obs.get("mps_daemon_log", []))]
        if "mps_limits" in obs:
            lines.append("MPS client defaults: " + "; ".join(f"{k} -> {v}" for k, v in obs["mps_limits"].items()))
    lines += [f"  plugin| {ln}" for ln in fold(obs.get("plugin_log", []))]
    if "registered" in obs:
        reg, adv = obs["registered"], obs.get("advertised", {})
        lines.append(f"registered: {reg.get('resource_name')} (endpoint {reg.get('endpoint')}, API {reg.get('version')})")
        lines.append(
            f"advertised: {adv.get('count')} devices ({adv.get('healthy')} healthy, {adv.get('distinct_ids')} distinct IDs "
            f"on {', '.join(adv.get('gpu_uuids', []))}); predicted {exp['count']} of {exp['resource']}"
        )
        lines.append(f"allocate 1 {obs.get('preferred')}: {json.dumps(obs.get('allocate'), sort_keys=True)}")
        if "allocate_two" in obs:
            lines.append(f"allocate 2: {json.dumps(obs['allocate_two'], sort_keys=True)}")
        if "plugin_cdi_spec" in obs:
            lines.append(f"plugin's CDI spec: {json.dumps(obs['plugin_cdi_spec'], sort_keys=True)}")
    else:
        lines.append(f"NOT REGISTERED: {obs.get('error')} (plugin exit {obs.get('plugin_exited')}, kubelet refused {obs.get('refused_by_kubelet')})")
    return lines


def result_line(case: dict[str, Any], obs: dict[str, Any]) -> str:
    obs = {**obs, "plugin_log": fold(obs.get("plugin_log", []))}
    return "RESULT " + json.dumps({"case": case, "observed": obs}, sort_keys=True)


def cdi_lines(cdi: dict[str, Any]) -> list[str]:
    lines = ["== nvidia-ctk cdi generate --output=/var/run/cdi/nvidia.yaml (the node script's command, driver on the host)"]
    lines += [f"  ctk| {ln}" for ln in fold(cdi.get("log", []))]
    lines.append(f"exit {cdi.get('rc')}; devices in the spec: {cdi.get('devices')}; nvidia-ctk cdi list: {cdi.get('list')}")
    lines.append("RESULT-CDI " + json.dumps({**cdi, "log": fold(cdi.get("log", []))}, sort_keys=True))
    return lines


@dataclass
class Record:
    header: list[str] = field(default_factory=list)
    """The comment lines at the top (how the run was made)."""
    gpu_before: str = ""
    gpu_after: str = ""
    results: list[dict[str, Any]] = field(default_factory=list)
    """{"case": ..., "observed": ...} per case, in run order."""
    cdi: dict[str, Any] = field(default_factory=dict)


def parse(text: str) -> Record:
    rec = Record()
    lines = text.splitlines()
    for i, line in enumerate(lines):
        if line.startswith("#"):
            rec.header.append(line)
        elif line == GPU_HEADER and i + 1 < len(lines):
            rec.gpu_before = lines[i + 1]
        elif line.startswith(AFTER):
            rec.gpu_after = line[len(AFTER):]
        elif line.startswith("RESULT "):
            rec.results.append(json.loads(line[len("RESULT "):]))
        elif line.startswith("RESULT-CDI "):
            rec.cdi = json.loads(line[len("RESULT-CDI "):])
    return rec


def render(rec: Record) -> str:
    out = [*rec.header, GPU_HEADER, rec.gpu_before]
    for r in rec.results:
        out += [*case_lines(r["case"], r["observed"]), result_line(r["case"], r["observed"])]
    out += cdi_lines(rec.cdi)
    out.append(f"{AFTER}{rec.gpu_after}")
    return "\n".join(out) + "\n"


if __name__ == "__main__":
    sys.stdout.write(render(parse(Path(sys.argv[1]).read_text())))
