"""Hostile and careless input, round five (issue 42), the settings side: the driver container's
package sources and certificates (`driver.repoConfig`, `driver.certConfig`), the Prometheus URLs of
the soak gate, the toolkit mirror's and the chart repository's URLs, the toolkit's signing key path,
pinned host keys, and the settings added since round four given empty, blank, huge or wrong values.

Each case is tried as a user would meet it: the stack config planned offline (nothing registered),
or a stack file read by `python -m gpu_stack plan` (tests/config/test_hostile_input.py's helpers).
"""

from __future__ import annotations

from typing import Any

import pytest

from gpu_stack.config import SettingsError, load_settings
from gpu_stack.config.fleet import FleetError, parse_fleet

from ..helpers import dev_config, plan_of, set_path
from .test_hostile_input import assert_clean_refusal, cli, project, stack_yaml

CA_PEM = (  # a real self-signed CA (openssl req -x509, P-256, "Example Internal CA", valid until 2126)
    "-----BEGIN CERTIFICATE-----\n"
    "MIIBkjCCATmgAwIBAgIUNpFJWp8Xr00CkAFqnxJiHg0gRr4wCgYIKoZIzj0EAwIw\n"
    "HjEcMBoGA1UEAwwTRXhhbXBsZSBJbnRlcm5hbCBDQTAgFw0yNjEyMDQxOTE5Mzla\n"
    "GA8yMTI2MTExMDE5MTkzOVowHjEcMBoGA1UEAwwTRXhhbXBsZSBJbnRlcm5hbCBD\n"
    "QTBZMBMGByqGSM49AgEGCCqGSM49AwEHA0IABE6EupCxEgoZny6m5YjLb1kICgIG\n"
    "hQyHRcxC3wzmKko1h8q0Zev73TFNVLhft+aU7wTb68wU13CLtxwtJ6D3viSjUzBR\n"
    "MB0GA1UdDgQWBBR5fPaPJMUmFZsnFdWvfvQS6DjwGDAfBgNVHSMEGDAWgBR5fPaP\n"
    "JMUmFZsnFdWvfvQS6DjwGDAPBgNVHRMBAf8EBTADAQH/MAoGCCqGSM49BAMCA0cA\n"
    "MEQCIGkMG9lkqQevsS7I9OsudSJnmOII6tpBhrAPuX9S9GIKAiBuJB2KPCdAHxU8\n"
    "3Zr5aVb9tkkQyCfjvSIVoA3Zmq4uaw==\n"
    "-----END CERTIFICATE-----\n"
)
SOURCES = "deb [arch=amd64] http://packages.example.internal/ubuntu jammy main universe\n"
CANARY = "canaryLoginToken42"


def _refusal(cfg: dict[str, Any]) -> str:
    """Planning `cfg` is refused before anything is registered; the message."""
    from gpu_stack.offline.runner import PlanError

    with pytest.raises(PlanError) as info:
        plan_of(cfg)
    assert info.value.registered == 0
    return str(info.value)


def _driver(**driver: Any) -> dict[str, Any]:
    cfg = dev_config()
    cfg["driver"] = {"placement": "operator", **driver}
    return cfg


def _repo(name: str, text: str) -> dict[str, Any]:
    return _driver(repoConfig={"files": {name: text}})


def _certs(files: dict[str, str]) -> dict[str, Any]:
    return _driver(repoConfig={"files": {"m.list": SOURCES}}, certConfig={"files": files})


# =========================================================================== 8. repoConfig, certConfig
@pytest.mark.parametrize(
    "name, text, where",
    [
        ("m.list", f"deb https://mirror:{CANARY}@packages.example.internal/ubuntu jammy main\n", "user:password@ in a URL on line 1"),
        ("m.list", f"deb https://packages.example.internal/ubuntu?token={CANARY} jammy main\n", "(?token=...) in a URL on line 1"),
        ("m.list", f"# old: https://bob:{CANARY}@old.example.internal/ubuntu\n{SOURCES}", "user:password@ in a URL on line 1"),
        ("m.sources", f"Types: deb\nURIs: https://u:{CANARY}@packages.example.internal/ubuntu\nSuites: jammy\n", "on line 2"),
        ("m.repo", f"[baseos]\nname=BaseOS\nbaseurl=https://u:{CANARY}@packages.example.internal/rhel9\n", "on line 3"),
        ("m.repo", f"[baseos]\nbaseurl=https://packages.example.internal/rhel9\nusername=bob\npassword={CANARY}\n", "dnf's username= on line 3"),
    ],
)
def test_a_login_anywhere_in_a_package_source_is_refused_and_never_echoed(name, text, where):
    message = _refusal(_repo(name, text))
    assert f'gpu-stack:driver.repoConfig.files["{name}"] = [file content of ' in message
    assert "carries credentials" in message and where in message
    assert "readable by anyone who may read ConfigMaps" in message
    assert CANARY not in message and "bob" not in message


@pytest.mark.parametrize(
    "name, text, problem",
    [
        ("m.list", "/etc/apt/sources.list.d/mirror.list\n", "line 1 is not a package source: apt's lines begin with deb"),
        ("m.list", "# only a comment\n", "holds no deb line"),
        ("m.list", "deb [arch=amd64 http://packages.example.internal/ubuntu jammy main\n", "opens '[' for options"),
        ("m.list", "deb http://packages.example.internal/ubuntu\n", "a URI (http://...) and a suite"),
        ("m.sources", "Types: deb\nURIs: http://packages.example.internal/ubuntu\n", "lacks Suites:"),
        ("m.sources", "deb http://packages.example.internal/ubuntu jammy main\n", "is not a deb822 field"),
        ("m.repo", "[baseos]\nname=BaseOS\n", "has no baseurl, mirrorlist or metalink"),
        ("m.repo", SOURCES, "not 'key=value' inside a '[id]' section"),
    ],
)
def test_a_package_source_is_parsed_as_its_package_manager_reads_it(name, text, problem):
    message = _refusal(_repo(name, text))
    assert f'gpu-stack:driver.repoConfig.files["{name}"]' in message and problem in message, message


def test_package_sources_as_written_in_the_guide_and_by_the_distributions_are_accepted():
    files = {
        "ubuntu.list": "# the site's mirror\ndeb [ arch=amd64 signed-by=/usr/share/keyrings/m.gpg ] "
                       "http://packages.example.internal/ubuntu jammy main\ndeb-src http://packages.example.internal/ubuntu jammy main\n",
        "ubuntu.sources": "Types: deb\nURIs: http://packages.example.internal/ubuntu\nSuites: jammy jammy-updates\n"
                          "Components: main universe\nSigned-By: /usr/share/keyrings/m.gpg\n",
        "rhel.repo": "[baseos]\nname=BaseOS\nbaseurl=http://packages.example.internal/rhel9/baseos\n"
                     "  http://packages2.example.internal/rhel9/baseos\ngpgcheck=1\n\n[appstream]\nname = AppStream\n"
                     "mirrorlist = http://packages.example.internal/rhel9/mirrors\n",
    }
    load_settings(_driver(repoConfig={"files": files}))


def test_package_sources_are_bounded_each_and_together():
    line = "deb http://packages.example.internal/ubuntu jammy main universe restricted multiverse\n"
    big = _refusal(_repo("m.list", line * 1000))
    assert 'gpu-stack:driver.repoConfig.files["m.list"] = [file content of 1000 lines, not shown]: is 83 KiB' in big
    assert "a package source file is at most 64 KiB" in big
    # 17 files within the bound each make a ConfigMap over Kubernetes' 1 MiB.
    many = {f"m{i}.list": line * (63 * 1024 // len(line)) for i in range(17)}
    total = _refusal(_driver(repoConfig={"files": many}))
    assert "gpu-stack:driver.repoConfig.files: makes the ConfigMap driver-repo-config-" in total
    assert "over Kubernetes' 1 MiB limit" in total
    count = _refusal(_driver(repoConfig={"files": {f"m{i}.list": SOURCES for i in range(65)}}))
    assert "gpu-stack:driver.repoConfig.files = [65 files, not shown]: must hold at most 64 entries" in count


@pytest.mark.parametrize(
    "text, problem",
    [
        ("-----BEGIN CERTIFICATE-----\nMIIBszCCAVmgAwIBAgIUZmFrZS1pbnRlcm5hbC1jYQ==\n-----END CERTIFICATE-----\n",
         "holds a block (line 1) that is not an X.509 certificate"),
        ("-----BEGIN CERTIFICATE-----\nnot base64!\n-----END CERTIFICATE-----\n", "whose text is not base64"),
        (CA_PEM.rsplit("-----END", 1)[0], "opens a certificate on line 1 that no END CERTIFICATE line closes"),
        (CA_PEM + "-----BEGIN PUBLIC KEY-----\nAAAA\n-----END PUBLIC KEY-----\n", "holds a PUBLIC KEY block (line 12)"),
        (CA_PEM.replace("CERTIFICATE", "TRUSTED CERTIFICATE"), "holds a TRUSTED CERTIFICATE block"),
        (CA_PEM.replace("3Zr5aVb9", "3Zr5aVb9AAAA"), "is not an X.509 certificate"),
        ("ca.example.internal:/etc/ssl/ca.crt\n", "holds no PEM certificate"),
    ],
)
def test_each_pem_block_is_parsed_as_an_x509_certificate(text, problem):
    message = _refusal(_certs({"ca.crt": text}))
    assert 'gpu-stack:driver.certConfig.files["ca.crt"] = [file content of ' in message and problem in message, message


def test_real_certificates_and_a_whole_bundle_are_accepted_and_a_bundle_is_bounded():
    load_settings(_certs({"ca.crt": CA_PEM, "tls-ca-bundle.pem": ("# Example Internal CA\n" + CA_PEM) * 150}))
    message = _refusal(_certs({"tls-ca-bundle.pem": CA_PEM * 500}))
    assert "a CA certificate file (a whole bundle included) is at most 256 KiB" in message


def test_a_file_the_stack_file_names_as_content_is_not_read(tmp_path):
    """The files are the content in the stack file, read through its bounded reader: a path where
    the content goes is refused as content, never opened (even a FIFO or /dev/zero)."""
    for path in ("/dev/zero", "/etc/apt/sources.list"):
        root = project(tmp_path / path.replace("/", "_"), stack_yaml(_repo("m.list", path)))
        proc = cli(root, "plan", "--stack", "t")
        assert_clean_refusal(proc, 'gpu-stack:driver.repoConfig.files["m.list"]', "is not a package source")


def test_the_operators_ca_file_is_read_as_every_file_is_and_parsed_as_certificates(tmp_path):
    """`operator.repositoryCaFile`, the certificate file the provider reads: a regular file within
    the bound, every block an X.509 certificate (a link to /etc/passwd is no CA bundle)."""
    import os

    fake = tmp_path / "fake.pem"
    fake.write_text("-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n")
    big = tmp_path / "big.pem"
    big.write_text(CA_PEM * 600)
    passwd = tmp_path / "passwd.pem"
    os.symlink("/etc/passwd", passwd)
    for path, problem in ((fake, "holds a block (line 1) that is not an X.509 certificate"),
                          (big, "larger than 262144 bytes; a CA bundle (PEM) is not that large"),
                          (passwd, "holds no PEM certificate")):
        cfg = dev_config()
        cfg["operator"] = {"repository": "https://charts.example.internal/nvidia", "repositoryCaFile": str(path)}
        message = _refusal(cfg)
        assert f"gpu-stack:operator.repositoryCaFile = {str(path)!r}: " in message and problem in message, message
        assert "root:" not in message


# =========================================================================== 9. Prometheus URLs of the soak gate
def _fleet_refusal(url: Any) -> str:
    doc = {"waves": [{"name": "canary", "stacks": ["dev"], "gate": {"soakSeconds": 60}}], "prometheus": {"dev": url}}
    with pytest.raises(FleetError) as info:
        parse_fleet(doc, ["dev"])
    return str(info.value)


@pytest.mark.parametrize(
    "url, problem",
    [
        ("http://prometheus.example.internal:0", "its port '0' is not a TCP port (1 to 65535)"),
        ("http://prometheus.example.internal:", "its port '' is not a TCP port"),
        ("http://prometheus.example.internal:9090/?dedup=true", "without a query ('?...')"),
        ("http://prometheus.example.internal:9090/?", "without a query"),
        ("http://prometheus.example.internal/" + "a" * 3000, "of at most 2048 characters"),
        ("http://prom..example.internal:9090", "is not a host name"),
        ("http://-prom.example.internal:9090", "is not a host name"),
        ("http://prom_1:9090", "is not a host name"),
        ("http://" + "a" * 64 + ".example.internal", "is not a host name"),
        ("http://999.0.0.1:9090", "is not an IPv4 address"),
        ("http://[fe80::1%eth0]:9090", "has an IPv6 zone"),
    ],
)
def test_a_prometheus_url_has_a_real_port_a_host_in_a_valid_form_and_no_query(url, problem):
    message = _fleet_refusal(url)
    assert "prometheus.dev" in message and problem in message, message
    assert all(len(line) <= 420 for line in message.splitlines())


@pytest.mark.parametrize("url", ["http://prometheus.example.internal:9090", "https://10.0.0.5:9090/prometheus/",
                                 "http://[fd00::5]:9090", "http://localhost:9090", "http://prometheus:9090"])
def test_prometheus_urls_as_users_write_them_are_accepted(url):
    parse_fleet({"waves": [{"name": "canary", "stacks": ["dev"]}], "prometheus": {"dev": url}}, ["dev"])


# =========================================================================== 11. left from round four
@pytest.mark.parametrize("repository", ["oci://nvidia/gpu-operator", "oci://nvidia", "oci://helm-charts/nvidia"])
def test_an_oci_repository_without_a_registry_host_is_a_docker_hub_path_and_is_refused(repository):
    cfg = set_path(dev_config(), "operator.repository", repository)
    message = _refusal(cfg)
    assert f"gpu-stack:operator.repository = {repository!r}: must begin with the registry host after oci://" in message
    assert "Docker Hub" in message and "oci://registry.example.internal/charts" in message


@pytest.mark.parametrize("repository", ["oci://registry.example.internal/charts", "oci://localhost:5000/charts",
                                        "oci://registry:5000/charts", "https://charts.example.internal/nvidia?channel=stable"])
def test_oci_repositories_with_a_host_and_https_ones_with_a_query_still_plan(repository):
    load_settings(set_path(dev_config(), "operator.repository", repository))


@pytest.mark.parametrize(
    "key, url, problem",
    [
        ("aptUrl", "http://packages.example.internal:0/nvidia", "its port '0' is not a TCP port"),
        ("aptUrl", "http://packages.example.internal:99999/nvidia", "its port '99999' is not a TCP port"),
        ("rpmUrl", "http://-packages.example.internal/nvidia", "is not a host name"),
        ("rpmUrl", "http://packages..example.internal/nvidia", "is not a host name"),
        ("aptUrl", "http://999.1.1.1/nvidia", "is not an IPv4 address"),
        ("aptUrl", "http://packages.example.internal/" + "a" * 3000, "at most 2048 characters"),
        ("gpgKey", "https://packages.example.internal:70000/nvidia.asc", "is not a TCP port"),
    ],
)
def test_the_toolkit_mirror_urls_are_checked_as_urls(key, url, problem):
    cfg = dev_config()
    cfg["toolkit"] = {"placement": "host", "packages": {"source": "mirror", "gpgKey": "/etc/pki/m.asc", key: url}}
    with pytest.raises(SettingsError) as info:
        load_settings(cfg)
    assert f"gpu-stack:toolkit.packages.{key}" in str(info.value) and problem in str(info.value), str(info.value)


def _toolkit(key: str) -> dict[str, Any]:
    cfg = dev_config()
    cfg["toolkit"] = {"placement": "host", "packages": {"source": "mirror", "aptUrl": "http://packages.example.internal/nvidia",
                                                        "gpgKey": key}}
    return cfg


@pytest.mark.parametrize("key", ["/dev/zero", "/dev/stdin", "/proc/self/fd/0", "/sys/kernel/notes"])
def test_the_toolkit_signing_key_cannot_name_a_device_or_kernel_state(key):
    with pytest.raises(SettingsError) as info:
        load_settings(_toolkit(key))
    assert f"gpu-stack:toolkit.packages.gpgKey = {key!r}: names a file under /{key.split('/')[1]}" in str(info.value)


def test_node_preparation_reads_a_key_file_only_when_it_is_a_regular_file_of_at_most_one_mib(tmp_path):
    """A FIFO, or a link to one, is never read or waited on; a key file over 1 MiB is not read whole."""
    import os

    from gpu_stack.design import node_prep
    from gpu_stack.design.derive import derive

    from ..node_fakes import FakeNode

    command = next(iter(derive(load_settings(_toolkit("/etc/pki/mirror/toolkit.asc"))).commands))
    script = node_prep.render_script(command.values)
    for case in ("fifo", "huge"):
        node = FakeNode(tmp_path / case, stubs=("nvidia-smi", "nvidia-ctk", "systemctl", "apt-get", "apt-mark", "gpg", "containerd"))
        target = node.root / "etc/pki/mirror/toolkit.asc"
        target.parent.mkdir(parents=True, exist_ok=True)
        if case == "fifo":
            os.mkfifo(node.root / "key.fifo")
            target.symlink_to(node.root / "key.fifo")
        else:
            target.write_text("-----BEGIN PGP PUBLIC KEY BLOCK-----\n" + "A" * 2 * 1024 * 1024)
        result = node.run(script, timeout=60)
        assert result.rc != 0, case
        wanted = "is not a regular file on this host" if case == "fifo" else "is larger than 1 MiB"
        assert f"signing key /etc/pki/mirror/toolkit.asc (gpu-stack:toolkit.packages.gpgKey) {wanted}" in result.stderr, result.stderr
        assert not any(c.startswith("gpg") for c in node.calls()), case


# =========================================================================== 10. host keys
ED25519_PUB = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIJD8OU8E9X5UQWWQrb4aAQ7OlAHH1TImTbMru2sr6b09"
ED25519_OTHER = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIGbnmh5ZN8Ap0n3AvvP7T8QufaHUlxQ+WaL1V2Z6P7Zl"
ECDSA_PUB = ("ecdsa-sha2-nistp256 AAAAE2VjZHNhLXNoYTItbmlzdHAyNTYAAAAIbmlzdHAyNTYAAABBBHtuNefOQz5pS2e7g/FShX2TSWq4OUH"
             "hswAUmhdOHPszkedQyIui3aqn+fwXIbQPEoymOMgbiGl5OC7BAmT2L/o=")


def _blob(*fields: bytes) -> str:
    import base64
    import struct

    return base64.b64encode(b"".join(struct.pack(">I", len(f)) + f for f in fields)).decode()


def _host_key_refusal(line: str, node: int = 0) -> str:
    with pytest.raises(SettingsError) as info:
        load_settings(set_path(dev_config(), f"nodes[{node}].hostKey", line))
    return str(info.value)


@pytest.mark.parametrize(
    "line, problem",
    [
        (f"otherhost {ED25519_PUB}", "its host field 'otherhost' names another host than this node (10.20.0.11)"),
        (f"10.20.0.99 {ED25519_PUB}", "its host field '10.20.0.99' names another host than this node"),
        (f"[10.20.0.12]:22 {ED25519_PUB}", "names another host than this node (10.20.0.11)"),
        (f"gpu-dev-1,!10.20.0.11 {ED25519_PUB}", "its host field excludes this node (!10.20.0.11)"),
        (f"|1|CUn+tKpp0P1tlnPZ1iwsOJ3EgJQ=|9M+2CoGKez7s0kprVbhgo4PnYh0= {ED25519_PUB}", "its host field a hashed field names another host than this node (10.20.0.12)"),  # hashes 10.20.0.11
    ],
)
def test_another_hosts_keyscan_line_is_refused_with_the_command_for_this_node(line, problem):
    text = _host_key_refusal(line, node=1 if line.startswith("|1|") else 0)
    key = "nodes[1]" if line.startswith("|1|") else "nodes[0]"
    assert f"gpu-stack:{key}.hostKey" in text and problem in text, text
    assert "ssh-keyscan -t ed25519 10.20.0.1" in text


@pytest.mark.parametrize(
    "line",
    [f"10.20.0.11 {ED25519_PUB}", f"[10.20.0.11]:2222 {ED25519_PUB}", f"gpu-dev-1 {ED25519_PUB}",
     f"gpu-dev-1,10.20.0.11 {ED25519_PUB} from keyscan", f"otherhost,10.20.0.11 {ECDSA_PUB}",
     f"|1|CUn+tKpp0P1tlnPZ1iwsOJ3EgJQ=|9M+2CoGKez7s0kprVbhgo4PnYh0= {ED25519_PUB}", f"{ED25519_PUB} root@gpu-dev-1 added today"],
)
def test_this_nodes_keyscan_and_pub_lines_are_accepted(line):
    words = line.split()
    at = next(i for i, w in enumerate(words) if w.startswith(("ssh-", "ecdsa-")))
    assert load_settings(set_path(dev_config(), "nodes[0].hostKey", line)).nodes[0].host_key == " ".join(words[at : at + 2])


def test_a_keyscan_line_is_not_checked_against_a_secret_address_offline():
    from gpu_stack.config.stack_files import SECRET_PLACEHOLDER_PREFIX

    cfg = set_path(dev_config(), "nodes[0].address", SECRET_PLACEHOLDER_PREFIX + "0123456789abcdef0123")
    set_path(cfg, "nodes[0].hostKey", f"10.20.0.99 {ED25519_PUB}")  # offline the address is a stand-in
    assert load_settings(cfg).nodes[0].host_key == ED25519_PUB


@pytest.mark.parametrize(
    "line, problem",
    [
        (f"{ED25519_PUB} {ED25519_OTHER}", "a second key (ssh-ed25519) follows the first"),
        (f"10.20.0.11 {ED25519_PUB} {ECDSA_PUB}", "a second key (ecdsa-sha2-nistp256) follows the first"),
        ("ecdsa-sha2-nistp256 " + _blob(b"ecdsa-sha2-nistp256", b"nistp256", b"\x04" + bytes(64)), "point is not on nistp256"),
        ("ecdsa-sha2-nistp256 " + _blob(b"ecdsa-sha2-nistp256", b"nistp256", b"\x04abc"), "point is not on nistp256"),
        ("ecdsa-sha2-nistp384 " + ECDSA_PUB.split()[1], "is a ecdsa-sha2-nistp256 key, but the line says ecdsa-sha2-nistp384"),
        (f"{ED25519_PUB} " + "x" * 5000, "of at most 4096 characters"),
    ],
)
def test_a_second_key_a_key_no_host_can_have_and_a_huge_line_are_refused(line, problem):
    text = _host_key_refusal(line)
    assert "gpu-stack:nodes[0].hostKey" in text and problem in text, text


def test_a_short_rsa_key_is_refused_like_every_rsa_key(tmp_path):
    import shutil
    import subprocess

    if shutil.which("ssh-keygen") is None:
        pytest.skip("ssh-keygen is not installed")
    subprocess.run(["ssh-keygen", "-q", "-t", "rsa", "-b", "1024", "-N", "", "-f", str(tmp_path / "rsa")], check=True)
    text = _host_key_refusal(f"10.20.0.11 {(tmp_path / 'rsa.pub').read_text().strip()}")
    assert "is an ssh-rsa key" in text and "`ssh-keyscan -t ed25519 <host>`" in text


# =========================================================================== settings added since round four
def test_an_ipv4_mapped_unspecified_or_broadcast_address_is_refused_like_the_plain_one():
    for address, what in (("::ffff:0.0.0.0", "the unspecified address"), ("::ffff:255.255.255.255", "the broadcast address")):
        with pytest.raises(SettingsError) as info:
            load_settings(set_path(dev_config(), "nodes[0].address", address))
        assert f"gpu-stack:nodes[0].address = {address!r}: is {what}" in str(info.value)


@pytest.mark.parametrize(
    "field, value, problem",
    [
        ("programs", {"kubectl": "//"}, "must be the absolute path of a file in the image"),
        ("programs", {"kubectl": "/bin/"}, "must be the absolute path of a file in the image"),
        ("programs", {"kubectl": "/../../usr/bin/kubectl"}, "no empty, '.' or '..' part"),
        ("user", "4294967296:0", "each a number from 0 to 2147483647"),
        ("user", "0:99999999999", "each a number from 0 to 2147483647"),
    ],
)
def test_a_job_image_declaration_names_real_paths_and_ids(field, value, problem):
    image = "registry.example.internal/team/kubectl:1.34"
    decl = {"shell": "busybox", "programs": {"kubectl": "/bin/kubectl"}, "user": "0:0", "kubectl": "1.31", field: value}
    cfg = dev_config()
    cfg["images"] = {"jobImages": {image: decl}}
    set_path(cfg, "mig.rollout.image", image)
    with pytest.raises(SettingsError) as info:
        load_settings(cfg)
    assert f'gpu-stack:images.jobImages["{image}"].{field}' in str(info.value) and problem in str(info.value), str(info.value)


# =========================================================================== as a user meets them
@pytest.mark.parametrize(
    "path, value, needle",
    [
        ("nodes[0].hostKey", f"otherhost {ED25519_PUB}", "gpu-stack:nodes[0].hostKey"),
        ("operator.repository", "oci://nvidia/gpu-operator", "must begin with the registry host after oci://"),
        ("toolkit.packages", {"source": "mirror", "aptUrl": "http://packages.example.internal:0/nvidia", "gpgKey": "/dev/stdin"},
         "gpu-stack:toolkit.packages.gpgKey = '/dev/stdin': names a file under /dev"),
        ("driver", {"placement": "operator", "repoConfig": {"files": {"m.list": SOURCES}},
                    "certConfig": {"files": {"ca.crt": CA_PEM.replace("MIIB", "MIIC")}}}, 'gpu-stack:driver.certConfig.files["ca.crt"]'),
    ],
)
def test_plan_refuses_each_in_one_line_and_exit_code_2(tmp_path, path, value, needle):
    cfg = set_path(dev_config(), path, value)
    if path == "toolkit.packages":
        cfg["toolkit"]["placement"] = "host"
    proc = cli(project(tmp_path, stack_yaml(cfg)), "plan", "--stack", "t")
    assert_clean_refusal(proc, needle)
