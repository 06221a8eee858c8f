"""The pure parts of sandbox/gpu_node_check (the run itself needs a GPU machine and root:
docs/node-preparation.md, "One real GPU node"): the OCI image layout, the loader-path reading, the
kubelet stage's files, and what the bundle takes from the stack's offline plan."""

from __future__ import annotations

import hashlib
import io
import json
import os
import shlex
import subprocess
import tarfile
from pathlib import Path

from gpu_stack.design.node_prep import LAUNCH_FLAG, script_hash
from sandbox.gpu_node_check import bundle, kubelet, oci

SHIM = Path(bundle.__file__).with_name("systemctl-shim.sh")


def _rootfs(tmp_path: Path) -> oci.Rootfs:
    (tmp_path / "hello").write_text("hi\n")
    r = oci.Rootfs()
    r.file("/usr/bin/hello", str(tmp_path / "hello"), 0o755)
    r.symlink("/bin", "usr/bin")
    r.dir("/tmp", 0o1777)
    r.text("/etc/passwd", "nobody:x:65534:65534::/:/bin/false\n")
    return r


def test_image_layout_is_a_valid_oci_layout_and_reproducible(tmp_path):
    files = oci.image_layout(_rootfs(tmp_path), "gpu-node-check.local/payload:1", env=["PATH=/usr/bin"], cmd=["bash"])
    for path, data in files.items():
        if path.startswith("blobs/sha256/"):
            assert hashlib.sha256(data).hexdigest() == path.rsplit("/", 1)[1]
    assert json.loads(files["oci-layout"]) == {"imageLayoutVersion": "1.0.0"}
    (entry,) = json.loads(files["index.json"])["manifests"]
    assert entry["annotations"] == {oci.NAME_ANNOTATION: "gpu-node-check.local/payload:1", oci.REF_ANNOTATION: "1"}
    assert entry["platform"] == {"architecture": "amd64", "os": "linux"}
    manifest = json.loads(files["blobs/sha256/" + entry["digest"].split(":")[1]])
    assert len(files["blobs/sha256/" + entry["digest"].split(":")[1]]) == entry["size"]
    config = json.loads(files["blobs/sha256/" + manifest["config"]["digest"].split(":")[1]])
    (layer,) = manifest["layers"]
    assert layer["mediaType"] == oci.MEDIA_LAYER
    # an uncompressed layer: its diff id is its digest
    assert config["rootfs"]["diff_ids"] == [layer["digest"]]
    assert config["config"]["Env"] == ["PATH=/usr/bin"] and config["config"]["Cmd"] == ["bash"]
    with tarfile.open(fileobj=io.BytesIO(files["blobs/sha256/" + layer["digest"].split(":")[1]])) as tar:
        members = {m.name: m for m in tar.getmembers()}
        assert sorted(members) == ["bin", "etc", "etc/passwd", "tmp", "usr", "usr/bin", "usr/bin/hello"]
        assert members["bin"].issym() and members["bin"].linkname == "usr/bin"
        assert members["tmp"].mode == 0o1777 and members["usr/bin/hello"].mode == 0o755
        assert {(m.uid, m.gid, m.mtime) for m in members.values()} == {(0, 0, 0)}
        assert tar.extractfile("usr/bin/hello").read() == b"hi\n"  # type: ignore[union-attr]
    again = oci.image_layout(_rootfs(tmp_path), "gpu-node-check.local/payload:1", env=["PATH=/usr/bin"], cmd=["bash"])
    assert again == files
    with tarfile.open(fileobj=io.BytesIO(oci.layout_tar(files))) as tar:
        assert {"index.json", "oci-layout", "blobs/sha256"} <= set(tar.getnames())


def test_paths_may_not_leave_the_root():
    r = oci.Rootfs()
    try:
        r.dir("/a/../../etc")
    except ValueError as exc:
        assert "leaves the root" in str(exc)
    else:
        raise AssertionError("accepted a path with ..")


def test_ldd_paths():
    out = (
        "\tlinux-vdso.so.1 (0x00007ffd5b7f2000)\n"
        "\tlibtinfo.so.6 => /lib/x86_64-linux-gnu/libtinfo.so.6 (0x00007f3c1c9a0000)\n"
        "\tlibc.so.6 => /lib/x86_64-linux-gnu/libc.so.6 (0x00007f3c1c7bf000)\n"
        "\tlibcuda.so.1 => not found\n"
        "\t/lib64/ld-linux-x86-64.so.2 (0x00007f3c1cb2f000)\n"
    )
    assert oci.ldd_paths(out) == ["/lib/x86_64-linux-gnu/libtinfo.so.6", "/lib/x86_64-linux-gnu/libc.so.6", "/lib64/ld-linux-x86-64.so.2"]
    assert oci.ldd_paths("\tnot a dynamic executable\n") == []


def test_host_entries_keep_every_link_on_the_way(tmp_path):
    # a merged-/usr host: /lib64 -> usr/lib64, the loader a link into /usr/lib/x86_64-linux-gnu
    (tmp_path / "usr/lib64").mkdir(parents=True)
    (tmp_path / "usr/lib/x86_64-linux-gnu").mkdir(parents=True)
    (tmp_path / "usr/lib/x86_64-linux-gnu/ld-linux-x86-64.so.2").write_bytes(b"\x7fELF")
    os.symlink("usr/lib64", tmp_path / "lib64")
    os.symlink("/usr/lib/x86_64-linux-gnu/ld-linux-x86-64.so.2", tmp_path / "usr/lib64/ld-linux-x86-64.so.2")
    entries = oci.host_entries("/lib64/ld-linux-x86-64.so.2", root=str(tmp_path))
    assert [(e.path, e.kind, e.target) for e in entries] == [
        ("/lib64", "symlink", "usr/lib64"),
        ("/usr/lib64/ld-linux-x86-64.so.2", "symlink", "/usr/lib/x86_64-linux-gnu/ld-linux-x86-64.so.2"),
        ("/usr/lib/x86_64-linux-gnu/ld-linux-x86-64.so.2", "file", None),
    ]
    r = oci.Rootfs()
    oci.add_host_path(r, "/lib64/ld-linux-x86-64.so.2", root=str(tmp_path))
    oci.add_host_path(r, "/lib64/ld-linux-x86-64.so.2", root=str(tmp_path))
    assert r.entries["/lib64"].kind == "symlink" and r.entries["/usr/lib/x86_64-linux-gnu"].kind == "dir"


def test_kubelet_stage_files(tmp_path):
    cfg = kubelet.kubelet_config("cgroupfs", tmp_path / "resolv.conf")
    assert "cgroupDriver: cgroupfs" in cfg and "staticPodPath: /etc/kubernetes/manifests" in cfg
    assert "containerRuntimeEndpoint: unix:///run/containerd/containerd.sock" in cfg
    pod = kubelet.static_pod(2, 4, "img:1", "nvidia.com/gpu", tmp_path, tmp_path, tmp_path)
    (c,) = pod["spec"]["containers"]
    assert c["resources"]["limits"] == {"nvidia.com/gpu": "1"} and c["imagePullPolicy"] == "Never"
    assert pod["spec"]["hostNetwork"] is True and pod["spec"]["securityContext"]["runAsUser"] == 65534
    checkpoint = json.dumps({"Data": {"PodDeviceEntries": None, "RegisteredDevices": {"nvidia.com/gpu": ["a::0", "a::1"]}}, "Checksum": 1})
    assert kubelet.registered_devices(checkpoint) == {"nvidia.com/gpu": ["a::0", "a::1"]}


def test_the_barrier_waits_for_every_pod(tmp_path):
    # the static pods' command, with /sync and the payload path pointed at a temporary folder
    sync = tmp_path / "sync"
    sync.mkdir()
    (tmp_path / "payloads").mkdir()
    (tmp_path / "payloads" / "cuda-smoke.sh").write_text('echo "PASS cuda-smoke: stand-in"\n')
    command = kubelet.barrier_command(2, limit=3).replace("/sync", str(sync)).replace("/payloads", str(tmp_path / "payloads"))
    alone = subprocess.run(["bash", "-c", command], env={"POD_NAME": "a", "PATH": os.environ["PATH"]}, capture_output=True, text=True, timeout=30)
    assert alone.returncode == 1 and "only 1 of 2 pods started within 3s" in alone.stdout
    both = subprocess.run(["bash", "-c", command], env={"POD_NAME": "b", "PATH": os.environ["PATH"]}, capture_output=True, text=True, timeout=30)
    assert both.returncode == 0 and "all 2 pods started" in both.stdout and "PASS" in both.stdout


def test_the_systemctl_shim_knows_only_containerd(tmp_path):
    proc = subprocess.run(["bash", str(SHIM), "restart", "docker"], env={"GPU_NODE_CHECK_STATE": str(tmp_path), "PATH": os.environ["PATH"]},
                          capture_output=True, text=True, timeout=30)
    assert proc.returncode == 1 and "only the containerd unit" in proc.stderr
    proc = subprocess.run(["bash", str(SHIM), "is-active", "--quiet", "containerd"],
                          env={"GPU_NODE_CHECK_STATE": str(tmp_path), "PATH": os.environ["PATH"]}, capture_output=True, text=True, timeout=30)
    assert proc.returncode == 3 and proc.stdout == ""
    assert (tmp_path / "systemctl.log").read_text().count("systemctl ") == 2


def test_the_bundle_takes_the_node_command_and_sharing_from_the_plan():
    plan = bundle.node_plan("dev", "h200-x", "H200", 1)
    create = bundle.node_command(plan, "h200-x")
    words = shlex.split(create)
    assert words[:4] == ["exec", "sh", "./.gpu-stack-node-prep.sh", LAUNCH_FLAG]
    assert words[4] == script_hash()
    values = dict(w.split("=", 1) for w in words[6:])
    assert values["GPU_STACK_NODE"] == "h200-x" and values["GPU_STACK_EXPECT_COUNT"] == "1"
    assert values["GPU_STACK_PHASES"] == "preflight toolkit runtime" and values["GPU_STACK_RUNTIME"] == "containerd"
    config, env, row = bundle.device_plugin(plan)
    assert "timeSlicing:" in config and "replicas: 4" in config
    assert env["DEVICE_LIST_STRATEGY"] == "cdi-annotations,cdi-cri"
    assert row["advertises"] == {"nvidia.com/gpu": 4}


def test_restricted_oom_goes_into_the_cri_table_of_the_stock_config():
    from sandbox.gpu_node_check.run import with_restricted_oom

    stock = ('version = 2\n\n[plugins]\n  [plugins."io.containerd.grpc.v1.cri"]\n'
             '    [plugins."io.containerd.grpc.v1.cri".cni]\n      bin_dir = "/usr/lib/cni"\n')
    out = with_restricted_oom(stock)
    assert '  [plugins."io.containerd.grpc.v1.cri"]\n    restrict_oom_score_adj = true\n    [plugins."io.containerd.grpc.v1.cri".cni]' in out
    assert out.count('[plugins."io.containerd.grpc.v1.cri"]') == 1  # no second header: valid TOML
    assert with_restricted_oom("version = 2\n").endswith('[plugins."io.containerd.grpc.v1.cri"]\n  restrict_oom_score_adj = true\n')
