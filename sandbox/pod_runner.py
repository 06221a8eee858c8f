"""A kubelet stand-in for the pods that only talk to the Kubernetes API (the node label Job, the
MIG layout guard, the MIG rollout, the free-capacity gate, the capacity checks): their container
command runs here, for real, as the kubelet would run it:

- with the files of its image, as config/job-images.yaml says them (the table the config rules
  read too, with its evidence): the GPU Operator's image runs under the real busybox, with only
  busybox's applets and the image's kubectl on PATH (no bash: a bash construct fails the Job as
  on a node), as the image's user 65532 unless the pod sets one; a command its image does not
  have fails to start as on a node (exit code 128, StartError); the toolchain's kubectl stands in
  only for the minor the image has (toolchain/versions.env KUBERNETES_VERSION), and any other
  image fails the pod with a message naming both, rather than passing with a kubectl the pod
  would not have;
- under the container's memory limit: a memory cgroup the runner creates per pod (cgroup v2
  `memory.max` or v1 `memory.limit_in_bytes`), so a script that needs more is OOM-killed
  (exit code 137, reason OOMKilled) as on a node; where no cgroup is writable, RLIMIT_DATA
  (`prlimit --data`) bounds it instead (RLIMIT_AS would stop any Go binary at start: the Go
  runtime reserves address space far beyond its use);
- as the pod's user: `runAsUser`/`runAsGroup` of the container or the pod (`setpriv`, no
  supplementary groups), refused like the kubelet refuses it when `runAsNonRoot` meets uid 0;
- as the pod's own ServiceAccount (a token from the TokenRequest API, so the RBAC the program
  grants is what is tested), with its ConfigMap and emptyDir volumes materialised in a folder the
  pod's user owns (mount paths in the command and env point there).

The pod then gets the phase, exit code and termination message the kubelet would write.
What it does not reproduce: the image's files beyond its shell, utilities and programs (an
Ubuntu image's userland is the host's), a read-only root filesystem
(the host's is not writable by an unprivileged user anyway), the emptyDir `sizeLimit`.

kwok leaves these pods Running (sandbox/cluster.py's stages); every other pod is kwok's.
"""

from __future__ import annotations

import base64
import contextlib
import functools
import json
import os
import re
import shutil
import subprocess
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from gpu_stack.config.job_images import ImageContents, contents_by_copy, table

from .cluster import RUNNER_CHECKS, RUNNER_PARTS, Cluster, ClusterError

OOM_EXIT = 137
_QUANTITY = re.compile(r"(\d+(?:\.\d+)?)(Ki|Mi|Gi|Ti|k|M|G|T)?")
_UNITS = {None: 1, "k": 10**3, "M": 10**6, "G": 10**9, "T": 10**12, "Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40}


def service_account_kubeconfig(cluster: Cluster, ns: str, sa: str, folder: Path) -> Path:
    """A kubeconfig that talks to the API server as ServiceAccount `ns/sa` (a TokenRequest token),
    as a pod of that account does: what the API server allows it is what its RBAC grants."""
    token = cluster.kubectl("create", "token", sa, "-n", ns, "--duration=2h").stdout.strip()
    admin = yaml.safe_load(cluster.kubeconfig.read_text())
    server = dict(admin["clusters"][0]["cluster"])
    if "certificate-authority" in server:
        # the CA inline, as the pod's own copy (the kubelet mounts ca.crt readable by the pod's
        # user; the cluster's file is not)
        ca = Path(server.pop("certificate-authority"))
        server["certificate-authority-data"] = base64.b64encode(ca.read_bytes()).decode()
    doc = {
        "apiVersion": "v1", "kind": "Config",
        "clusters": [{"name": "in-cluster", "cluster": server}],
        "users": [{"name": sa, "user": {"token": token}}],
        "contexts": [{"name": "in-cluster", "context": {"cluster": "in-cluster", "user": sa, "namespace": ns}}],
        "current-context": "in-cluster",
    }
    path = folder / "kubeconfig"
    path.write_text(yaml.safe_dump(doc))
    return path


BUSYBOX = shutil.which("busybox") or "/bin/busybox"
"""The real busybox the operator image's Jobs run under (Debian's busybox-static: `.ci/run
--prepare` installs it; NVIDIA ships the same package in the image since gpu-operator c9351361b)."""


def image_files(image: str) -> ImageContents | None:
    """What `image` carries (config/job-images.yaml, the one table the config rules read too), also
    for a mirror's copy of a known image; None for an image the table does not know."""
    try:
        return contents_by_copy(image)
    except ValueError:
        return None


def kubectl_refusal(image: str, have: str) -> str | None:
    """Why a pod of `image` cannot run with the toolchain's kubectl `have` (None: it can): the
    image's kubectl must be of that minor (its row names the minor of the image's build)."""
    files = image_files(image)
    if files is not None and files.kubectl is not None and (have == files.kubectl or have.startswith(files.kubectl + ".")):
        return None
    carries = (
        (f"carries kubectl v{files.kubectl}" if files.kubectl else "carries no kubectl") if files
        else "is not an image this runner knows the files of (config/job-images.yaml: " + ", ".join(sorted(table())) + ")"
    )
    return (
        f"sandbox pod runner: image {image} {carries}, and the toolchain has kubectl v{have} only "
        "(toolchain/versions.env KUBERNETES_VERSION): the pod is not run with another kubectl than its image's; "
        f"use an image of kubectl v{have}, or build that version into the toolchain"
    )


@functools.cache
def busybox_applets() -> frozenset[str]:
    """The applets of the real busybox (`busybox --list`, asked once); empty where it is not installed."""
    if not Path(BUSYBOX).is_file():
        return frozenset()
    out = subprocess.run([BUSYBOX, "--list"], capture_output=True, text=True, check=False).stdout
    return frozenset(name for name in out.split() if "/" not in name)


def image_paths(files: ImageContents) -> dict[str, str]:
    """Every absolute path a command can name in the image: its own programs, and its shell's."""
    paths = {path: name for name, path in files.programs}
    if files.shell == "busybox":
        # the -dev base keeps busybox and its applet links under /busybox (NVIDIA links /bin/sh
        # itself on that base: k8s-driver-manager v0.9.1 Dockerfile.distroless:59-60)
        paths.update({f"/busybox/{name}": name for name in busybox_applets()})
        paths["/busybox/busybox"] = "busybox"
    elif files.shell == "bash":
        paths.update({"/bin/sh": "sh", "/bin/bash": "bash", "/usr/bin/bash": "bash"})
    return paths


def start_error(image: str, argv: list[str]) -> str | None:
    """The kubelet's StartError message when the container's command is not in its image (the
    runtime's exec fails: runc `exec: "bash": executable file not found in $PATH`, or for a path
    `exec: "/bin/bash": stat /bin/bash: no such file or directory`), else None."""
    files = image_files(image)
    if files is None or not argv:
        return None
    if "/" in argv[0]:
        if argv[0] in image_paths(files):
            return None
    elif files.has(argv[0]) or (files.utilities == "busybox" and argv[0] in busybox_applets()):
        return None
    elif files.utilities == "gnu":
        return None  # a Debian/Ubuntu userland: the host's stands in for it
    cause = f"stat {argv[0]}: no such file or directory" if "/" in argv[0] else "executable file not found in $PATH"
    return (
        "failed to create containerd task: failed to create shim task: OCI runtime create failed: runc create failed: "
        f'unable to start container process: exec: "{argv[0]}": {cause}: unknown'
    )


def memory_bytes(quantity: str | int | None) -> int | None:
    """Bytes of a Kubernetes memory quantity (`128Mi`, `1G`, `1048576`); None when absent."""
    if quantity is None:
        return None
    match = _QUANTITY.fullmatch(str(quantity))
    if not match:
        raise ValueError(f"not a memory quantity this runner reads: {quantity!r}")
    return int(float(match.group(1)) * _UNITS[match.group(2)])


def run_as(pod_spec: dict[str, Any], container: dict[str, Any],
           image_user: tuple[int, int] = (0, 0)) -> tuple[int | None, int | None, str | None]:
    """(uid, gid, refusal) the kubelet runs the container with: the container's securityContext
    over the pod's, else the image's USER (`image_user`, its row of config/job-images.yaml: 65532
    for the operator image). A refusal is the kubelet's message for `runAsNonRoot` with a root
    user (the container then never starts)."""
    pod_sc = pod_spec.get("securityContext") or {}
    sc = container.get("securityContext") or {}

    def pick(key: str) -> Any:
        return sc[key] if key in sc else pod_sc.get(key)

    uid, gid = pick("runAsUser"), pick("runAsGroup")
    from_image = uid is None
    if from_image:
        # the image's user: the kubelet checks runAsNonRoot against the image's numeric USER
        uid = image_user[0]
        gid = image_user[1] if gid is None else gid
    if pick("runAsNonRoot") and not uid:
        # pkg/kubelet/kuberuntime/security_context_others.go verifyRunAsNonRoot
        what = "container has runAsNonRoot and image will run as root" if from_image else "container's runAsUser breaks non-root policy"
        return uid, gid, what
    return uid, gid, None


@dataclass
class MemoryCgroups:
    """Per-pod memory cgroups under one folder this runner creates (v2 `memory.max`, or the v1
    memory hierarchy's `memory.limit_in_bytes`)."""

    base: Path
    version: int

    @classmethod
    def create(cls, name: str) -> MemoryCgroups | None:
        """A folder for the pods' cgroups, where one can be made here (as root); None where not."""
        root = Path("/sys/fs/cgroup")
        with contextlib.suppress(OSError):
            if (root / "cgroup.controllers").exists():
                # v2: a folder under the root (which may hold processes), memory delegated to it
                if "memory" not in (root / "cgroup.controllers").read_text().split():
                    return None
                if "memory" not in (root / "cgroup.subtree_control").read_text().split():
                    (root / "cgroup.subtree_control").write_text("+memory")
                base = root / name
                base.mkdir(exist_ok=True)
                (base / "cgroup.subtree_control").write_text("+memory")
                return cls(base, 2)
            v1 = root / "memory"
            if (v1 / "cgroup.procs").exists():
                own = next((line.split(":", 2)[2] for line in Path("/proc/self/cgroup").read_text().splitlines()
                            if line.split(":", 2)[1].split(",").count("memory")), "/")
                parent = v1 / own.lstrip("/")
                base = (parent if parent.is_dir() else v1) / name
                base.mkdir(exist_ok=True)
                return cls(base, 1)
        return None

    def pod(self, name: str, limit: int) -> Path:
        group = self.base / name
        group.mkdir()
        if self.version == 2:
            (group / "memory.max").write_text(str(limit))
            with contextlib.suppress(OSError):
                (group / "memory.swap.max").write_text("0")
        else:
            (group / "memory.limit_in_bytes").write_text(str(limit))
            with contextlib.suppress(OSError):  # without swap accounting there is no such file
                (group / "memory.memsw.limit_in_bytes").write_text(str(limit))
        return group

    def oom_killed(self, group: Path) -> bool:
        text = (group / ("memory.events" if self.version == 2 else "memory.oom_control")).read_text()
        counts = dict(line.split() for line in text.splitlines() if len(line.split()) == 2)
        return int(counts.get("oom_kill", "0")) > 0

    @staticmethod
    def remove(group: Path) -> None:
        for _ in range(50):  # the last process may still be leaving
            try:
                group.rmdir()
                return
            except FileNotFoundError:
                return
            except OSError:
                time.sleep(0.1)

    def close(self) -> None:
        with contextlib.suppress(OSError):
            self.base.rmdir()


def _text(output: bytes | str | None) -> str:
    return output.decode(errors="replace") if isinstance(output, bytes) else output or ""


def _mapper(mounts: dict[str, Path]):
    ordered = sorted(mounts, key=len, reverse=True)

    def remap(value: str) -> str:
        for mount in ordered:
            if value == mount or value.startswith(mount + "/"):
                return str(mounts[mount]) + value[len(mount):]
        return value

    return remap


@dataclass
class Launch:
    """How one container process is started: its user and its memory bound."""

    argv: list[str]
    env: dict[str, str]
    cwd: Path
    uid: int | None = None
    gid: int | None = None
    memory: int | None = None
    timeout: float = 3600


@dataclass
class Ran:
    returncode: int
    stdout: str
    stderr: str
    oom_killed: bool = False
    args: list[str] = field(default_factory=list)


HOST_SH = shutil.which("sh") or "/bin/sh"
HOST_SETPRIV = shutil.which("setpriv") or "/usr/bin/setpriv"
HOST_PRLIMIT = shutil.which("prlimit") or "/usr/bin/prlimit"
"""The runner's own wrappers around a container's process, by absolute path: the container's PATH
is its image's (for the operator image, busybox's applets only)."""


def launch(spec: Launch, cgroups: MemoryCgroups | None, name: str) -> Ran:
    """Runs `spec` to its end: in a fresh memory cgroup of `cgroups` when there is a limit (the
    process joins it before it becomes the pod's user and execs), else under RLIMIT_DATA; as
    `uid`/`gid` through setpriv."""
    inner = list(spec.argv)
    if spec.uid is not None or spec.gid is not None:
        ids = [f"--reuid={spec.uid}"] if spec.uid is not None else []
        ids += [f"--regid={spec.gid}"] if spec.gid is not None else []
        inner = [HOST_SETPRIV, *ids, "--clear-groups", "--", *inner]
    group = None
    if spec.memory is not None and cgroups is not None:
        group = cgroups.pod(name, spec.memory)
        argv = [HOST_SH, "-c", 'echo $$ >"$0" && exec "$@"', str(group / "cgroup.procs"), *inner]
    elif spec.memory is not None:
        argv = [HOST_PRLIMIT, f"--data={spec.memory}", "--", *inner]
    else:
        argv = inner
    try:
        try:
            proc = subprocess.run(argv, env=spec.env, capture_output=True, text=True, timeout=spec.timeout, cwd=str(spec.cwd))
            code, out, err = proc.returncode, proc.stdout, proc.stderr
        except subprocess.TimeoutExpired as exc:
            # TimeoutExpired holds bytes whatever `text` was
            code, out, err = 124, _text(exc.stdout), _text(exc.stderr)
        oom = group is not None and cgroups is not None and cgroups.oom_killed(group)
    finally:
        if group is not None:
            MemoryCgroups.remove(group)
    if code < 0:
        code = 128 - code  # killed by a signal: the runtime reports 128 + the signal
    return Ran(code, out, err, oom_killed=oom and code == OOM_EXIT, args=spec.argv)


@dataclass
class PodRunner:
    cluster: Cluster
    interval: float = 0.5
    runs: dict[str, Ran] = field(default_factory=dict)
    """"namespace/pod" -> the finished run (for tests and for reading a failure)."""
    refused: dict[str, str] = field(default_factory=dict)
    """"namespace/pod" -> why the runner did not start its container (the pod's own message)."""
    _seen: set[str] = field(default_factory=set, init=False)
    _stop: threading.Event = field(default_factory=threading.Event, init=False)
    _threads: list[threading.Thread] = field(default_factory=list, init=False)
    _image: Path | None = field(default=None, init=False)
    _cgroups: MemoryCgroups | None = field(default=None, init=False)

    @property
    def memory_enforcement(self) -> str:
        """How container memory limits are enforced here (a cgroup, or RLIMIT_DATA)."""
        return f"cgroup v{self._cgroups.version} ({self._cgroups.base})" if self._cgroups else "RLIMIT_DATA (no writable memory cgroup)"

    def start(self) -> None:
        # The image's files as the pod's user can reach them: the toolchain's kubectl (under a
        # home folder an unprivileged user cannot enter) copied into a folder of the runner's own.
        self._image = Path(tempfile.mkdtemp(prefix="pod-runner-image-"))
        self._image.chmod(0o755)
        (self._image / "tools").mkdir(mode=0o755)
        shutil.copy2(self.cluster.tools["kubectl"], self._image / "tools" / "kubectl")
        self._cgroups = MemoryCgroups.create(f"gpu-stack-pods-{os.getpid()}-{id(self):x}")
        t = threading.Thread(target=self._loop, name="pod-runner", daemon=True)
        t.start()
        self._threads.append(t)

    def stop(self) -> None:
        self._stop.set()
        for t in self._threads:
            t.join(timeout=5)
        if self._cgroups is not None:
            self._cgroups.close()
        if self._image is not None:
            shutil.rmtree(self._image, ignore_errors=True)

    def _loop(self) -> None:
        selectors = [f"gpu-stack/check in ({','.join(RUNNER_CHECKS)})", f"app.kubernetes.io/part-of in ({','.join(RUNNER_PARTS)})"]
        while not self._stop.is_set():
            for selector in selectors:
                try:
                    found = self.cluster.read("/api/v1/pods", label_selector=selector) or {}
                except ClusterError:
                    continue
                for pod in found.get("items") or []:
                    key = f"{pod['metadata']['namespace']}/{pod['metadata']['name']}"
                    if pod.get("status", {}).get("phase") == "Running" and key not in self._seen:
                        self._seen.add(key)
                        t = threading.Thread(target=self._run, args=(pod,), name=f"run {key}", daemon=True)
                        t.start()
                        self._threads.append(t)
            self._stop.wait(self.interval)

    def _image_bin(self, files: ImageContents | None) -> tuple[Path, str]:
        """(bin folder, PATH) of a container of an image with `files`: for a busybox image a link
        per applet of the real busybox and the image's own programs, nothing else (so a bash
        construct or a GNU-only program fails as on a node); for an Ubuntu/Debian userland the
        image's programs before the host's; for an image with no shell its programs only."""
        assert self._image is not None
        kind = files.shell if files else "gnu"
        folder = self._image / f"bin-{kind}-{abs(hash(files)) if files else 0:x}"
        if not folder.exists():
            staging = Path(tempfile.mkdtemp(prefix="bin-", dir=self._image))
            staging.chmod(0o755)
            if kind == "busybox":
                if not busybox_applets():
                    raise RuntimeError(f"sandbox pod runner: {BUSYBOX} is not installed (apt-get install busybox-static)")
                for name in busybox_applets():
                    (staging / name).symlink_to(BUSYBOX)
            for name, _path in files.programs if files else (("kubectl", ""),):
                if (self._image / "tools" / name).exists():
                    if (staging / name).is_symlink():
                        (staging / name).unlink()
                    (staging / name).symlink_to(self._image / "tools" / name)
            with contextlib.suppress(OSError):
                staging.rename(folder)
        path = str(folder) if kind in ("busybox", "none") else f"{folder}{os.pathsep}/usr/local/bin:/usr/bin:/bin"
        return folder, path

    def _kubeconfig(self, ns: str, sa: str, folder: Path) -> Path:
        return service_account_kubeconfig(self.cluster, ns, sa, folder)

    def _run(self, pod: dict[str, Any]) -> None:
        meta, spec = pod["metadata"], pod["spec"]
        ns = meta["namespace"]
        key = f"{ns}/{meta['name']}"
        (container,) = spec["containers"][:1]
        files = image_files(container["image"])
        uid, gid, refusal = run_as(spec, container, files.user if files else (0, 0))
        if refusal is not None:
            # the kubelet refuses the container's config before the runtime starts anything
            self.refused[key] = refusal
            self._waiting(pod, container, "CreateContainerConfigError", refusal)
            return
        command = (container.get("command") or []) + (container.get("args") or [])
        failed_start = start_error(container["image"], command)
        if failed_start is not None:
            # what a node does: the runtime cannot exec the command, exit code 128, StartError
            self.refused[key] = failed_start
            self._finish(pod, container, 128, failed_start, reason="StartError")
            return
        refusal = kubectl_refusal(container["image"], self.cluster.tools.kube_version)
        if refusal is not None:
            # a kubelet would start it, with the image's kubectl: that one is not here
            self.refused[key] = refusal
            self._finish(pod, container, 1, refusal)
            return
        with tempfile.TemporaryDirectory(prefix=f"pod-{meta['name']}-") as tmp:
            folder = Path(tmp)
            volumes: dict[str, Path] = {}
            for vol in spec.get("volumes") or []:
                target = folder / "volumes" / vol["name"]
                target.mkdir(parents=True)
                if "configMap" in vol:
                    data = self.cluster.get_json("configmap", vol["configMap"]["name"], "-n", ns).get("data") or {}
                    for name, text in data.items():
                        (target / name).write_text(text)
                        (target / name).chmod(vol["configMap"].get("defaultMode", 0o644))
                volumes[vol["name"]] = target
            mounts = {m["mountPath"]: volumes[m["name"]] for m in container.get("volumeMounts") or [] if m["name"] in volumes}
            remap = _mapper(mounts)
            bin_dir, search = self._image_bin(files)
            env = {"PATH": search}
            for item in container.get("env") or []:
                if "value" in item:
                    env[item["name"]] = remap(item["value"])
                elif (item.get("valueFrom") or {}).get("fieldRef", {}).get("fieldPath") == "spec.nodeName":
                    env[item["name"]] = spec.get("nodeName", "")
            termination = folder / "termination-log"
            termination.touch()
            env["TERMINATION_LOG"] = str(termination)
            env["KUBECONFIG"] = str(self._kubeconfig(ns, spec.get("serviceAccountName") or "default", folder))
            # the pod's user owns what the kubelet gives it (emptyDir, termination log, token)
            for path in [folder, *folder.rglob("*")]:
                os.chown(path, uid if uid is not None else 0, gid if gid is not None else 0)
            folder.chmod(0o755)
            argv = [remap(a) for a in (container.get("command") or []) + (container.get("args") or [])]
            by_path = image_paths(files) if files is not None else {}
            if argv and argv[0] in by_path:
                argv[0] = str(bin_dir / by_path[argv[0]])  # a command by its path in the image
            limit = memory_bytes(((container.get("resources") or {}).get("limits") or {}).get("memory"))
            name = re.sub(r"[^a-zA-Z0-9_.-]", "-", key)
            run = launch(Launch(argv, env, folder, uid, gid, limit), self._cgroups, name)
            # terminationMessagePolicy FallbackToLogsOnError: the log's tail only when it failed
            message = termination.read_text() or ((run.stdout + run.stderr)[-4000:] if run.returncode else "")
        self.runs[key] = run
        self._finish(pod, container, run.returncode, message, oom=run.oom_killed)

    def _now(self) -> str:
        return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())

    def _patch(self, pod: dict[str, Any], status: dict[str, Any]) -> None:
        self.cluster.kubectl(
            "patch", "pod", pod["metadata"]["name"], "-n", pod["metadata"]["namespace"], "--subresource=status",
            "--type=merge", "-p", json.dumps({"status": status}), check=False,
        )

    def _waiting(self, pod: dict[str, Any], container: dict[str, Any], reason: str, message: str) -> None:
        """The container never starts: the pod stays Pending with the kubelet's reason (its Job
        waits until its activeDeadlineSeconds, as on a node)."""
        self._patch(pod, {
            "phase": "Pending",
            "containerStatuses": [{
                "name": container["name"], "image": container["image"], "imageID": "", "ready": False,
                "restartCount": 0, "started": False, "state": {"waiting": {"reason": reason, "message": message}},
            }],
        })

    def _finish(self, pod: dict[str, Any], container: dict[str, Any], code: int, message: str, oom: bool = False,
                reason: str | None = None) -> None:
        now = self._now()
        reason = reason or ("OOMKilled" if oom else "Completed" if code == 0 else "Error")
        # The kubelet turns a finished pod's Ready and ContainersReady to False (PodCompleted): the
        # kubernetes provider reports a failed Job's pod, its termination message included, only
        # from a Ready condition that is not True (cloud-ready-checks v1.3.0 pod/check.go podReady).
        conditions = [
            {**c, "status": "False", "reason": "PodCompleted", "lastTransitionTime": now} if c.get("type") in ("Ready", "ContainersReady") else c
            for c in (pod.get("status") or {}).get("conditions") or []
        ]
        self._patch(pod, {
            "phase": "Succeeded" if code == 0 else "Failed",
            **({"conditions": conditions} if conditions else {}),
            "containerStatuses": [{
                "name": container["name"], "image": container["image"], "imageID": "", "ready": False,
                "restartCount": 0, "started": False,
                "state": {"terminated": {"exitCode": code, "reason": reason,
                                         "message": message, "startedAt": now, "finishedAt": now}},
            }],
        })
