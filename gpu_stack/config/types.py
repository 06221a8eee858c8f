"""The base model, constants and reusable annotated types of the stack config.

Each annotated type carries the check of one kind of value (a Kubernetes label value, a
DNS-1123 label, a namespace of the stack's own, a container image, a Prometheus duration, a
label selector, a POSIX user, a map of Kubernetes labels), so a model field states what it holds
by its type and every field of that kind is checked, and worded, the same way.
"""

from __future__ import annotations

import re
from typing import Annotated, Any, Final

from pydantic import AfterValidator, BaseModel, BeforeValidator, ConfigDict, model_validator
from pydantic.alias_generators import to_camel

from .grammars import helm_release_name, image, reads_as_text_unquoted, ssh_user
from .safe_input import PlainStr

NAMESPACE = "gpu-stack"
"""The Pulumi config namespace of every key (`gpu-stack:<key>`)."""
CHART_VERSION: Final = "v25.10.1"
CHART_REPOSITORY = "https://helm.ngc.nvidia.com/nvidia"
TOOLKIT_VERSION: Final = "1.18.1"
OPERATOR_IMAGE: Final = f"nvcr.io/nvidia/gpu-operator:{CHART_VERSION}"
"""The GPU Operator's own image at the chart's version (the chart's operator and validator)."""
KUBECTL_IMAGE: Final = "nvcr.io/nvidia/gpu-operator:v25.10.1"
"""The default image of the Jobs that talk to the API (label Job, MIG layout guard, MIG rollout,
capacity, MIG-state and free-capacity checks, benchmark collector), which run POSIX sh scripts
with kubectl: the operator's own image at v25.10.1, a literal, not the chart's version: what the
image holds changes between releases (v26.3.0 drops kubectl), so a chart bump must not move the
Jobs to an image nobody checked. config/job-images.yaml says what it holds, with the evidence:
busybox's sh and applets (no bash), kubectl 1.34 at /usr/bin, user 65532. Every cluster of the
stack pulls it already (a mirror holds it already). kubectl supports one minor version of skew
either way, and the scripts use only GA core APIs (get, label, patch, the Eviction API, logs).
Kubernetes' own `registry.k8s.io/kubectl` carries no shell: the scripts cannot start there."""
MPS_MAX_REPLICAS = 48
RESERVED_SHARING_KEYS = ("default", "none")
"""ConfigMap keys the stack writes itself: the cluster-wide profile and the opt-out."""
SYSTEM_NAMESPACES = ("default", "kube-system", "kube-public", "kube-node-lease")

# Kubernetes label values (and device-plugin config keys, which double as label values).
LABEL_VALUE_RE = re.compile(r"^(?:[A-Za-z0-9](?:[A-Za-z0-9._-]{0,61}[A-Za-z0-9])?)$")
# RFC 1123 subdomain: node names, namespaces are stricter (label) but we check them separately.
DNS_SUBDOMAIN_RE = re.compile(
    r"^[a-z0-9](?:[a-z0-9-]{0,61}[a-z0-9])?(?:\.[a-z0-9](?:[a-z0-9-]{0,61}[a-z0-9])?)*$"
)
DNS_LABEL_RE = re.compile(r"^[a-z0-9](?:[a-z0-9-]{0,61}[a-z0-9])?$")
DURATION_RE = re.compile(r"^(0|([0-9]+y)?([0-9]+w)?([0-9]+d)?([0-9]+h)?([0-9]+m)?([0-9]+s)?([0-9]+ms)?)$")
GPU_MODEL_RE = re.compile(r"^[A-Za-z0-9](?:[A-Za-z0-9 ._+-]{0,62}[A-Za-z0-9)])?$")
SEMVER_RE = re.compile(r"^v?[0-9]+\.[0-9]+\.[0-9]+(?:[-+][0-9A-Za-z.-]+)?$")
K8S_LABEL_KEY_RE = re.compile(r"^([a-z0-9]([a-z0-9.-]*[a-z0-9])?/)?[A-Za-z0-9]([A-Za-z0-9._-]{0,61}[A-Za-z0-9])?$")
PROM_LABEL_NAME_RE = re.compile(r"^[a-zA-Z_][a-zA-Z0-9_]*$")
PERCENT_RE = re.compile(r"^(?:100|[1-9]?[0-9])%$")

# Kubernetes label selector as the operator's upgrade controller parses it (metav1.ParseToLabelSelector
# syntax): comma-separated `key`, `!key`, `key=v`, `key==v`, `key!=v`, `key in (a,b)`, `key notin (a,b)`.
_SEL_KEY = r"(?:[a-z0-9](?:[a-z0-9.-]{0,251}[a-z0-9])?/)?[A-Za-z0-9](?:[A-Za-z0-9._-]{0,61}[A-Za-z0-9])?"
_SEL_VAL = r"(?:[A-Za-z0-9](?:[A-Za-z0-9._-]{0,61}[A-Za-z0-9])?)?"
_SEL_REQ = (
    rf"(?:!\s*{_SEL_KEY}|{_SEL_KEY}\s*(?:(?:==?|!=)\s*{_SEL_VAL}|\s(?:in|notin)\s*"
    rf"\(\s*{_SEL_VAL}(?:\s*,\s*{_SEL_VAL})*\s*\))?)"
)
LABEL_SELECTOR_RE = re.compile(rf"^\s*{_SEL_REQ}(?:\s*,\s*{_SEL_REQ})*\s*$")


class ConfigModel(BaseModel):
    """Base of every settings model: unknown keys refused, camelCase aliases, frozen, documented."""

    model_config = ConfigDict(
        extra="forbid",
        alias_generator=to_camel,
        populate_by_name=True,
        frozen=True,
        str_strip_whitespace=False,
        use_attribute_docstrings=True,
    )

    @model_validator(mode="before")
    @classmethod
    def _one_spelling(cls, data: Any) -> Any:
        return one_spelling(cls, data)


def one_spelling(model: type[BaseModel], data: Any) -> Any:
    """`data` for `model`, or ValueError where it gives a setting under both its spellings
    (`gpuTemperature` and `gpu_temperature`), of which pydantic would silently take one."""
    if isinstance(data, dict):
        for name, info in model.model_fields.items():
            alias = info.alias
            if alias and alias != name and alias in data and name in data:
                raise ValueError(f"sets {alias!r} twice, also as {name!r}: one of them would be silently ignored; keep {alias!r}")
    return data


# --------------------------------------------------------------------------- checks
def label_value(value: str) -> str:
    if not LABEL_VALUE_RE.fullmatch(value):
        raise ValueError(
            "must be a Kubernetes label value: at most 63 characters of letters, digits, "
            "'.', '_' and '-', beginning and ending with a letter or digit"
        )
    return value


def dns_label(value: str) -> str:
    if not DNS_LABEL_RE.fullmatch(value):
        raise ValueError(
            "must be a DNS-1123 label: at most 63 lowercase letters, digits and '-', "
            "beginning and ending with a letter or digit"
        )
    return value


def not_system_namespace(value: str) -> str:
    if value in SYSTEM_NAMESPACES or value.startswith("kube-"):
        raise ValueError(
            "is a Kubernetes system namespace (default and kube-* belong to the cluster); "
            "use a namespace of the stack's own, such as gpu-operator or gpu-validation"
        )
    return value


def profile_names(profiles: dict[str, Any]) -> dict[str, Any]:
    """Profile names become node label values: each must be one."""
    for key in profiles:
        try:
            label_value(key)
        except ValueError as exc:
            raise ValueError(f"profile name {key!r} {exc}") from None
    return profiles


def duration(value: str) -> str:
    if value == "" or not DURATION_RE.fullmatch(value):
        raise ValueError("must be a Prometheus duration such as 0s, 5m or 1h30m")
    return value


def scrape_interval(value: str) -> str:
    if not DURATION_RE.fullmatch(value) or value == "":
        raise ValueError("must be a Prometheus duration such as 15s, 1m or 1m30s")
    return value


def selector(value: str) -> str:
    if value and not LABEL_SELECTOR_RE.fullmatch(value):
        raise ValueError(
            "must be a Kubernetes label selector such as 'app=training' or 'team in (a,b),!debug' "
            "(or empty for none)"
        )
    if value.lstrip().startswith("!"):
        # The chart writes the selector unquoted into the ClusterPolicy's YAML: a leading '!' is a tag.
        raise ValueError(
            "must not begin with '!': the chart writes it unquoted into YAML, where '!' starts a tag; "
            "put another requirement first, such as 'app=batch,!critical'"
        )
    if value and not reads_as_text_unquoted(value):
        raise ValueError(
            "reads as a number, a boolean or null where the chart writes it unquoted into YAML "
            "(the ClusterPolicy would refuse it); use a selector such as 'app=batch'"
        )
    return value


def k8s_labels(value: dict[str, str]) -> dict[str, str]:
    for key, text in value.items():
        if not K8S_LABEL_KEY_RE.fullmatch(key):
            raise ValueError(f"label key {key!r} is not a valid Kubernetes label key")
        if text != "":
            try:
                label_value(text)
            except ValueError as exc:
                raise ValueError(f"label {key!r} value {text!r} {exc}") from None
    return value


def label_text(value: Any) -> Any:
    """A label value typed by the CLI: `pulumi config set --path` stores `1` and `true` as a number
    and a boolean, but a label value is always a string, so those are read as the text they were
    typed as. Anything else is left to the string check (a float such as 1.10 is ambiguous: 1.1)."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    return value


# --------------------------------------------------------------------------- annotated types
LabelText = Annotated[PlainStr, BeforeValidator(label_text)]
"""A string that is only ever a label value: a whole number or a boolean is taken as its text."""
LabelValue = Annotated[LabelText, AfterValidator(label_value)]
"""A Kubernetes label value (profile and MIG config names become node label values)."""
DnsLabel = Annotated[PlainStr, AfterValidator(dns_label)]
"""A DNS-1123 label: an object name."""
HelmReleaseName = Annotated[PlainStr, AfterValidator(helm_release_name)]
"""A Helm release name as Helm takes it: a DNS-1123 subdomain of at most 53 characters."""
StackNamespace = Annotated[PlainStr, AfterValidator(dns_label), AfterValidator(not_system_namespace)]
"""A namespace of the stack's own: a DNS-1123 label, not `default` or `kube-*`."""
SshUser = Annotated[PlainStr, AfterValidator(ssh_user)]
"""An SSH user name as the OpenSSH client takes it (domain users, dots and uppercase included)."""
ImageRef = Annotated[PlainStr, AfterValidator(image)]
JobImageRef = Annotated[PlainStr, AfterValidator(image)]
"""The image of a Job: a reference here; what it must carry is a rule (rules/job_images.py)."""
"""An image that runs the stack's bash scripts with kubectl (not one known to have no shell)."""
"""A container image reference, parsed by the distribution reference grammar."""
Duration = Annotated[PlainStr, AfterValidator(duration)]
"""A Prometheus duration (an alert's `for`)."""
ScrapeInterval = Annotated[PlainStr, AfterValidator(scrape_interval)]
"""A Prometheus duration that is a scrape interval."""
LabelSelector = Annotated[PlainStr, AfterValidator(selector)]
"""A Kubernetes label selector as the operator's upgrade controller parses it; empty for none."""
K8sLabels = Annotated[dict[PlainStr, LabelText], AfterValidator(k8s_labels)]
"""Kubernetes labels: valid keys, each value empty or a label value (`1` or `true` as typed)."""
