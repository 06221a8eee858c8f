"""Every promise of the config guide, for every field: the settings models are walked (config_walk.py),
so a field added tomorrow is held to the same rules without anyone listing it here.

- every int field refuses true/false and strings that are not whole numbers, and takes the
  decimal string `pulumi config set` stores;
- every bool field refuses yes/on/1/y/t/off/no and friends;
- every float field refuses true/false, nan, inf and words;
- every string field (and every mapping key) refuses control, invisible, line and paragraph
  separator characters; only the text fields (CSV, kubeconfig, private key) take newlines and tabs;
- every string field given a number or a flag says to write it as a string;
- identity strings refuse blank and look-alike values;
- a URL-typed field refuses credentials in the URL, pointing at secret settings.
"""

from __future__ import annotations

from typing import Any

import pytest

from gpu_stack.config import SettingsError, load_settings
from gpu_stack.config.grammars import identity, url_without_credentials

from ..config_walk import RICH, Leaf, config_with, config_with_key, leaves, unreached

LEAVES = leaves()


def _problems(cfg: dict[str, Any]) -> dict[str, str] | None:
    """key -> message of each problem, or None when the config loads."""
    try:
        load_settings(cfg)
    except SettingsError as exc:
        return {p.key: p.message for p in exc.problems}
    return None


def _refused_at(leaf: Leaf, value: Any) -> str | None:
    """The message refusing `value` at the leaf's key, or None when it was accepted (or refused elsewhere)."""
    problems = _problems(config_with(leaf.path, value))
    return None if problems is None else problems.get(leaf.key)


def _of(kind: str) -> list[Leaf]:
    return [leaf for leaf in LEAVES if kind in leaf.kinds]


def test_the_walk_reaches_every_model_and_the_rich_config_is_valid():
    assert unreached() == set(), "add an entry reaching these models to config_walk.rich_config()"
    assert _problems(RICH) is None
    # Sanity of the walk itself: it finds fields of each kind in nested models, lists and mappings.
    keys = {leaf.key for leaf in LEAVES}
    assert {"gpu-stack:driver.upgradePolicy.drain.timeoutSeconds", "gpu-stack:alerts.rules.xidFatal.codes[0]",
            'gpu-stack:mig.profiles.custom[0].mig-devices["1g.10gb"]', "gpu-stack:toolkit.cdi"} <= keys
    assert len(_of("int")) >= 25 and len(_of("bool")) >= 30 and len(_of("str")) >= 40


NOT_WHOLE_NUMBERS = [True, False, "true", "yes", "1.5", 2.5, "1e3", " 5", "5 ", "+5", "0x10", "٣", "３", "", "five", [1], {"a": 1}]  # noqa: RUF001 - look-alikes on purpose


@pytest.mark.parametrize("leaf", _of("int"), ids=lambda leaf: leaf.key)
def test_every_int_field_refuses_flags_and_what_is_not_a_whole_number(leaf):
    accepted = [v for v in NOT_WHOLE_NUMBERS if _refused_at(leaf, v) is None]
    assert accepted == [], f"{leaf.key} accepted {accepted!r}"
    message = _refused_at(leaf, True)
    assert "true or false" in message or "must be" in message


@pytest.mark.parametrize("leaf", [leaf for leaf in _of("int") if isinstance(leaf.base(), int) and not isinstance(leaf.base(), bool)],
                         ids=lambda leaf: leaf.key)
def test_every_int_field_takes_the_decimal_string_pulumi_config_set_stores(leaf):
    assert _refused_at(leaf, str(leaf.base())) is None


NOT_FLAGS = ["yes", "no", "on", "off", "y", "n", "t", "f", "1", "0", 1, 0, 1.0, "Yes", "ON", "enabled", "", "true ", [True]]


@pytest.mark.parametrize("leaf", _of("bool"), ids=lambda leaf: leaf.key)
def test_every_bool_field_refuses_yes_on_1_and_friends(leaf):
    accepted = [v for v in NOT_FLAGS if _refused_at(leaf, v) is None]
    assert accepted == [], f"{leaf.key} accepted {accepted!r}"
    for good in (True, False, "true", "false"):
        problems = _problems(config_with(leaf.path, good))
        assert problems is None or leaf.key not in problems, (leaf.key, good, problems)


NOT_NUMBERS = [True, False, "yes", "nan", "inf", "-inf", float("nan"), float("inf"), "1,5", " 1", "1e3", "", "85C"]


@pytest.mark.parametrize("leaf", _of("float"), ids=lambda leaf: leaf.key)
def test_every_float_field_refuses_flags_and_what_is_not_a_finite_number(leaf):
    accepted = [v for v in NOT_NUMBERS if _refused_at(leaf, v) is None]
    assert accepted == [], f"{leaf.key} accepted {accepted!r}"
    assert _refused_at(leaf, str(leaf.base() if leaf.base() is not None else 0.5)) is None


INVISIBLE = {
    "nul": "\x00", "escape": "\x1b", "bell": "\x07", "del": "\x7f", "c1-nel": "\x85", "c1-csi": "\x9b",
    "zero-width-space": "\u200b", "zero-width-joiner": "\u200d", "word-joiner": "\u2060", "bidi-override": "\u202e",
    "bidi-isolate": "\u2066", "bom": "\ufeff", "soft-hyphen": "\u00ad", "line-separator": "\u2028",
    "paragraph-separator": "\u2029", "no-break-space": "\u00a0", "ideographic-space": "\u3000",
    "private-use": "\ue000", "unassigned": "\U000e0080", "tag-char": "\U000e0041",
}
LINE_BREAKS = {"newline": "\n", "carriage-return": "\r", "tab": "\t", "vertical-tab": "\x0b", "form-feed": "\x0c"}
STRING_LEAVES = [leaf for leaf in LEAVES if leaf.kinds & {"str", "text", "secret", "literal"}]


def _valid_text(leaf: Leaf) -> str:
    base = leaf.base()
    if isinstance(base, str):
        return base
    default = leaf.default
    return default if isinstance(default, str) and default else "x"


def _with_char(text: str, ch: str) -> list[str]:
    return [text + ch, ch + text, text[:1] + ch + text[1:]]


def _one_line_secret(leaf: Leaf) -> bool:
    """A password or token (safe_input.SecretLine): a secret held to the one-line rules."""
    return any(getattr(v, "__name__", "") == "_secret_line" for v in leaf.validators)


@pytest.mark.parametrize("leaf", STRING_LEAVES, ids=lambda leaf: leaf.key)
def test_every_string_field_refuses_control_and_invisible_characters(leaf):
    text_field = bool(leaf.kinds & {"text", "secret"}) and not _one_line_secret(leaf)
    refused = dict(INVISIBLE)
    if not text_field:
        refused.update(LINE_BREAKS)
    accepted = [
        (name, value) for name, ch in refused.items() for value in _with_char(_valid_text(leaf), ch)
        if _refused_at(leaf, value) is None
    ]
    assert accepted == [], f"{leaf.key} accepted {accepted[:3]!r}"


@pytest.mark.parametrize("leaf", [leaf for leaf in STRING_LEAVES if leaf.kinds & {"text", "secret"} and not _one_line_secret(leaf)],
                         ids=lambda leaf: leaf.key)
def test_text_fields_take_newlines_and_tabs(leaf):
    message = _refused_at(leaf, _valid_text(leaf).rstrip("\n") + "\n\tmore\r\n")
    assert message is None or "control character" not in message, message


KEY_SLOTS = [leaf for leaf in LEAVES if "key" in leaf.kinds]


@pytest.mark.parametrize("leaf", KEY_SLOTS, ids=lambda leaf: leaf.key)
def test_every_mapping_key_refuses_control_and_invisible_characters(leaf):
    base = RICH
    for part in leaf.path:
        base = base.get(part, {}) if isinstance(base, dict) else base[part]
    first = next(iter(base), "x") if isinstance(base, dict) else "x"
    accepted = []
    for name, ch in {**INVISIBLE, **LINE_BREAKS}.items():
        problems = _problems(config_with_key(leaf.path, first + ch))
        if problems is None or not any(k.startswith(leaf.key) for k in problems):
            accepted.append(name)
    assert accepted == [], f"{leaf.key} accepted keys with {accepted}"


def _label_text(leaf: Leaf) -> bool:
    """A string that is only ever a label value: a whole number or a flag is read as its text."""
    return any(getattr(v, "__name__", "") == "label_text" for v in leaf.validators)


@pytest.mark.parametrize("leaf", [leaf for leaf in STRING_LEAVES if not leaf.kinds & {"secret", "int", "float"}],
                         ids=lambda leaf: leaf.key)
@pytest.mark.parametrize("number", [1.3, 580, True])
def test_every_string_field_given_a_number_or_a_flag_says_to_write_it_as_a_string(leaf, number):
    message = _refused_at(leaf, number)
    if _label_text(leaf) and not isinstance(number, float):
        # Label values take `1` and `true` as the text typed (pulumi config set --path stores them
        # as a number and a boolean), then judge that text (a profile named 580 must exist); a
        # float (1.10 read as 1.1) is still refused below.
        assert message is None or "write it as a string" not in message, (leaf.key, message)
        return
    assert message is not None and "write it as a string" in message, (leaf.key, message)


def test_the_label_text_fields_are_the_label_values():
    assert {leaf.key for leaf in STRING_LEAVES if _label_text(leaf)} >= {
        "gpu-stack:nodes[0].sharing", "gpu-stack:nodes[0].mig", "gpu-stack:alerts.labels.team"}


def test_an_unquoted_kubernetes_version_is_refused_with_the_quoted_value_to_write():
    message = _refused_at(next(leaf for leaf in LEAVES if leaf.key == "gpu-stack:kubernetes.version"), 1.3)
    assert 'write it as a string, in quotes ("1.30")' in message


IDENTITY_LEAVES = [leaf for leaf in STRING_LEAVES if identity in leaf.validators]
LOOK_ALIKES = ["", " ", "   ", "dev-cluster ", " dev-cluster", "dev-сluster", "dev-cluster\u00a0", "ｄev-cluster", "dev-cluster\u200b"]  # noqa: RUF001 - look-alikes on purpose


def test_the_identity_strings_are_found_by_their_type():
    assert {leaf.key for leaf in IDENTITY_LEAVES} >= {"gpu-stack:kubernetes.clusterIdentifier", "gpu-stack:kubernetes.context"}


@pytest.mark.parametrize("leaf", IDENTITY_LEAVES, ids=lambda leaf: leaf.key)
def test_identity_strings_refuse_blank_and_look_alike_values(leaf):
    accepted = [v for v in LOOK_ALIKES if _refused_at(leaf, v) is None]
    assert accepted == [], f"{leaf.key} accepted {accepted!r}"
    assert _refused_at(leaf, "arn:aws:eks:eu-west-1:123456789012:cluster/prod") is None


def _is_url_check(func: Any) -> bool:
    code = getattr(func, "__code__", None)
    return code is not None and "url_without_credentials" in code.co_names


URL_LEAVES = [leaf for leaf in STRING_LEAVES if any(_is_url_check(v) for v in leaf.validators)]
CREDENTIAL_URLS = [
    "https://user:secret@charts.example.com/nvidia", "https://token@charts.example.com/nvidia",
    "oci://robot:pw@registry.example.com/charts", "https://charts.example.com/nvidia?token=abc",
    "https://charts.example.com/nvidia?X-Amz-Signature=abc&X-Amz-Credential=k", "https://charts.example.com/x?access_token=t",
]


def test_the_url_fields_are_found_by_their_type():
    assert "gpu-stack:operator.repository" in {leaf.key for leaf in URL_LEAVES}


@pytest.mark.parametrize("leaf", URL_LEAVES, ids=lambda leaf: leaf.key)
@pytest.mark.parametrize("url", CREDENTIAL_URLS)
def test_every_url_field_refuses_credentials_in_the_url_and_points_at_secret_settings(leaf, url):
    message = _refused_at(leaf, url)
    assert message is not None and "without credentials" in message and "--secret" in message, message


@pytest.mark.parametrize("url", ["https://charts.example.com/nvidia", "oci://registry.example.com:5000/charts",
                                 "https://[fd00::1]:8443/charts", "https://charts.example.com/x?version=1"])
def test_a_url_without_credentials_is_accepted(url):
    assert url_without_credentials(url, ("https", "oci"), query=True) == url
