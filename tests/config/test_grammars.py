"""Grammars, not patterns: each field of a kind is found by its type (config_walk.py) and held to the
grammar of what it names; a valid value is never refused, an invalid one never accepted.

The image reference parser is checked against the distribution reference grammar written out
as one regular expression here (the spec's productions, composed independently of the parser),
on strings generated from that expression and on random strings near it.
"""

from __future__ import annotations

import ipaddress
import re
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings as hsettings, strategies as st

from gpu_stack.config import SettingsError, load_settings
from gpu_stack.config.grammars import DIGEST_LENGTHS, NAME_LIMIT, helm_release_name, image, parse_image, ssh_user
from gpu_stack.config.job_images import JOB_IMAGE_KEYS
from gpu_stack.config.safe_input import check_address
from gpu_stack.config.types import selector

from ..config_walk import LEAVES_BY_VALIDATOR, config_with

# --------------------------------------------------------------------------- the spec as one regex
_ALNUM = r"[a-z0-9]+"
_SEPARATOR = r"(?:[_.]|__|[-]+)"
_PATH_COMPONENT = rf"{_ALNUM}(?:{_SEPARATOR}{_ALNUM})*"
_DOMAIN_COMPONENT = r"(?:[a-zA-Z0-9]|[a-zA-Z0-9][a-zA-Z0-9-]*[a-zA-Z0-9])"
_HOST = rf"(?:{_DOMAIN_COMPONENT}(?:\.{_DOMAIN_COMPONENT})*|\[[a-fA-F0-9:]+\])"
_DOMAIN = rf"{_HOST}(?::[0-9]+)?"
_TAG = r"[\w][\w.-]{0,127}"
_DIGEST = r"[A-Za-z][A-Za-z0-9]*(?:[-_+.][A-Za-z][A-Za-z0-9]*)*:[0-9a-fA-F]{32,}"
REFERENCE = re.compile(rf"(?:({_DOMAIN})/)?({_PATH_COMPONENT}(?:/{_PATH_COMPONENT})*)(?::{_TAG})?(?:@({_DIGEST}))?", re.ASCII)


def spec_accepts(value: str) -> bool:
    """The grammar, plus its rules outside the expression: a path of at most 255 characters, a
    digest of an algorithm registries verify with the length it has, an IPv6 host that is one."""
    m = REFERENCE.fullmatch(value)
    if not m:
        return False
    domain, path, digest = m.groups()
    name = f"{domain}/{path}" if domain else path  # distribution counts the whole name, domain included
    if len(name) > NAME_LIMIT or not _host_ok(domain):
        return False
    if digest:
        algorithm, _, encoded = digest.partition(":")
        if algorithm not in DIGEST_LENGTHS or not re.fullmatch(rf"[0-9a-f]{{{DIGEST_LENGTHS[algorithm]}}}", encoded):
            return False
    return True


def _host_ok(domain: str | None) -> bool:
    """Rules outside the expression a runtime applies to a registry: an IPv6 host that is one, a
    TCP port (1 to 65535: it dials it), DNS labels of at most 63 characters."""
    if domain is None:
        return True
    host, port = domain, None
    if domain.startswith("["):
        end = domain.index("]")
        try:
            ipaddress.IPv6Address(domain[1:end])
        except ValueError:
            return False
        host, port = "", domain[end + 2 :] or None
    elif ":" in domain:
        host, port = domain.rsplit(":", 1)
    if port is not None and not (len(port) <= 5 and 1 <= int(port) <= 65535):
        return False
    return all(len(label) <= 63 for label in host.split(".")) and len(host) <= 253


def _parses(value: str) -> bool:
    try:
        parse_image(value)
    except ValueError:
        return False
    return True


@hsettings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much])
@given(st.from_regex(REFERENCE, fullmatch=True))
def test_every_reference_the_grammar_generates_is_accepted_unless_a_rule_outside_it_refuses_it(value):
    assert _parses(value) == spec_accepts(value), value


NEAR = st.text(alphabet="abzAZ09._-/:@[]%+", min_size=1, max_size=24) | st.builds(
    lambda a, b: a + b,
    st.sampled_from(["nvcr.io/nvidia/cuda", "localhost:5000/x", "[fd00::1]:5000/x", "Reg.io/a", "a__b", "a---b/c", "ubuntu"]),
    st.sampled_from([":v1", ":" + "t" * 128, ":" + "t" * 129, "@sha256:" + "a" * 64, "@sha256:" + "A" * 64,
                     "@sha512:" + "b" * 128, "@sha256:" + "a" * 63, "@md5:" + "a" * 32, ":.x", "/", "//x", "_", ""]),
)


@hsettings(max_examples=600, deadline=None)
@given(NEAR)
def test_a_string_near_the_grammar_is_accepted_exactly_when_the_grammar_accepts_it(value):
    assert _parses(value) == spec_accepts(value), value


IMAGE_LEAVES = LEAVES_BY_VALIDATOR(image)
VALID_IMAGES = [
    "ubuntu", "nvcr.io/nvidia/k8s/cuda-sample:vectoradd-cuda12.5.0", "localhost:5000/team/kubectl:v1.31.4",
    "[fd00::1]:5000/kubectl", "Registry.Example.com/team/image:Tag_1", "a__b/c---d:" + "t" * 128,
    "registry.k8s.io/pause@sha256:" + "0" * 64, "r.io/x:1@sha512:" + "f" * 128,
    "r.io/" + "a" * 250 + ":" + "t" * 128,  # a 255-character name: the limit counts the name, not tag or digest
]
INVALID_IMAGES = [
    "registry.example.com/" + "a" * 240,  # a 261-character name (its path alone 240): distribution counts the whole name
    "Ubuntu", "ubuntu:" + "t" * 129, "ubuntu@sha256:" + "0" * 63, "ubuntu@sha256:" + "A" * 64, "ubuntu@md5:" + "0" * 32,
    "a//b", "-a", "a:.x", "[fe80::1%eth0]/x", "a/b:", "x/" + "a" * 255, "nvcr.io/nvidia/cuda:12 ", "$(id)",
]


def test_the_image_fields_are_found_by_their_type():
    assert {leaf.key for leaf in IMAGE_LEAVES} >= {"gpu-stack:validation.images.cuda", "gpu-stack:mig.rollout.image"}


JOB_IMAGE_CONTENTS = {"shell": "bash", "programs": {"kubectl": "/k", "vectorAdd": "/v", "nbody": "/n"}, "kubectl": "1.34"}
"""What a Job image the grammar tests name carries: everything a Job starts (the contents rule,
rules/job_images.py, is another test's; here only the reference's grammar)."""


def _message(leaf: Any, value: Any) -> str | None:
    cfg = config_with(leaf.path, value)
    if tuple(str(p) for p in leaf.path) in {tuple(k) for k in JOB_IMAGE_KEYS} and isinstance(value, str):
        cfg.setdefault("images", {}).setdefault("jobImages", {})[value] = JOB_IMAGE_CONTENTS
    try:
        load_settings(cfg)
    except SettingsError as exc:
        return next((p.message for p in exc.problems if p.key == leaf.key), "refused elsewhere")
    return None


@pytest.mark.parametrize("leaf", IMAGE_LEAVES, ids=lambda leaf: leaf.key)
def test_every_image_field_takes_every_valid_reference_and_refuses_invalid_ones_naming_the_part(leaf):
    assert [v for v in VALID_IMAGES if _message(leaf, v) is not None] == []
    assert [v for v in INVALID_IMAGES if _message(leaf, v) is None] == []
    assert "its tag" in _message(leaf, "ubuntu:" + "t" * 129)
    assert "64 lowercase hex digits" in _message(leaf, "ubuntu@sha256:" + "0" * 63)


# --------------------------------------------------------------------------- Helm release names
RELEASE_LEAVES = LEAVES_BY_VALIDATOR(helm_release_name)


@pytest.mark.parametrize("leaf", RELEASE_LEAVES, ids=lambda leaf: leaf.key)
def test_release_names_are_held_to_helms_own_limit_and_grammar(leaf):
    assert leaf.key in {"gpu-stack:operator.releaseName", "gpu-stack:dra.releaseName"}
    for good in ("a" * 53, "gpu-operator", "gpu.operator-2", "0"):
        assert _message(leaf, good) is None, good
    for bad in ("a" * 54, "GPU", "gpu_operator", "gpu-", ".gpu", "gpu..op", ""):
        assert "must be a Helm release name" in (_message(leaf, bad) or ""), bad


# --------------------------------------------------------------------------- SSH users
USER_LEAVES = LEAVES_BY_VALIDATOR(ssh_user)


@pytest.mark.parametrize("leaf", USER_LEAVES, ids=lambda leaf: leaf.key)
def test_ssh_users_are_taken_as_openssh_takes_them(leaf):
    for good in ("root", "ubuntu", "ec2-user", "john.doe", "Admin", "1user", "ann@corp.example", "CORP\\ann", "svc$", "a" * 255):
        assert _message(leaf, good) is None, good
    for bad in ("-oProxyCommand=x", "a;b", "a'b", 'a"b', "a`b", "a|b", "a&b", "a(b", "a{b", "a<b", "a b -x",
                "ann:style", "ann\\", " ann", "a" * 256, ""):
        assert _message(leaf, bad) is not None, bad
    assert {leaf.key for leaf in USER_LEAVES} == {"gpu-stack:ssh.user", "gpu-stack:nodes[0].user"}


# --------------------------------------------------------------------------- addresses
@pytest.mark.parametrize("good", ["10.0.0.5", "fd00::5", "fe80::1%eth0", "fe80::1%3", "fe80::1%enp0s31f6",
                                  "::ffff:10.0.0.1", "gpu-1.example.com", "gpu-1.example.com.", "GPU-1"])
def test_addresses_are_parsed_ipv6_zones_included(good):
    assert check_address(good) == good


@pytest.mark.parametrize("bad", ["999.1.1.1", "10.0.0.1:22", "[fd00::1]", "fe80::1%", "fe80::1%$(reboot)",
                                 "fe80::1%eth0/x", "fe80::1%" + "e" * 16, "010.0.0.1", "a..b", "10.1", "-a.example", "a_b.example"])
def test_addresses_that_do_not_parse_are_refused(bad):
    with pytest.raises(ValueError):
        check_address(bad)


# --------------------------------------------------------------------------- selectors written unquoted
SELECTOR_LEAVES = LEAVES_BY_VALIDATOR(selector)


@pytest.mark.parametrize("leaf", SELECTOR_LEAVES, ids=lambda leaf: leaf.key)
def test_selectors_the_chart_writes_unquoted_never_read_as_another_yaml_type(leaf):
    for bad in ("1", "y", "N", "yes", "On", "off", "null", "0x1F", "0o17", "1e3", "1.5", "1_000", " 7 ", "!app"):
        assert _message(leaf, bad) is not None, bad
    for good in ("app=training", "team in (a,b),!debug", "yes-please", "y.example/x", "1a", "app"):
        assert _message(leaf, good) is None, good
    assert len(SELECTOR_LEAVES) == 2
