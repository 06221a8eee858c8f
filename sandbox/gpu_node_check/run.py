"""gpu-node-check on the GPU machine, as root: python3 -m sandbox.gpu_node_check.run --bundle DIR --out OUT

Standard library only (the machine's own python3). Stages, in order (--stages picks some):

  machine     what the machine is: kernel, OS, GPU and driver, PID 1, cgroups, nvcc
  install     Debian's runc and containerd packages with dpkg; the toolkit's binaries where its
              packages put them (/usr/bin) and its config as their postinst writes it; crictl,
              kubelet, device plugin in /opt/gpu-node-check/bin
  containerd  containerd started with the package's stock config (systemd where PID 1 is
              systemd, else systemctl-shim.sh, which does what the unit does)
  runc-probe  runc alone (no containerd) on a minimal bundle: which namespaces this kernel lets it
              create (what fails, with runc's debug log); where Debian's runc cannot start a
              container at all, the other OCI runtimes of the bundle's alt/ (another runc, crun)
              are tried, and the first that works becomes `runc` on PATH (/usr/local/sbin/runc,
              ahead of /usr/sbin/runc for containerd's shim and nvidia-container-runtime alike)
  node        the stack's node command, exactly as the engine sends it over SSH (the script at
              ~/.gpu-stack-node-prep.sh, `sh -c <create>` in the home directory), twice: what each
              run changed (files, /dev/char, containerd restarts)
  images      vectorAdd built with nvcc; two OCI images from the machine's own files (the payload
              image and the CRI sandbox image), imported with ctr; no registry
  containers  through containerd's CRI with crictl: the GPU by CDI (the CRI field, then the
              annotation) running cuda-smoke.sh; no GPU asked for; the nvidia runtime with
              NVIDIA_VISIBLE_DEVICES=all and the stack's isolation; the same under the toolkit's
              default (the contrast: the check is not vacuous)
  systemd-cgroup  where the node script made no /dev/char links (containerd's stock runc options
              use cgroupfs): the same node with `SystemdCgroup = true` in config.toml, as kubeadm
              nodes set it, from the stock files: the node script twice (links, udev rule, one
              restart; then nothing), then the files as before and containerd restarted
  kubelet     the kubelet standalone on that containerd, the device plugin with the stack's
              sharing config, four static pods each asking for one GPU replica

Readable lines go to stdout and OUT/gpu-node-check.txt, one `STEP {json}` line per step (name, ok,
seconds, facts) to OUT/steps.jsonl. The GPU's settings are never changed (MIG mode is read at the
start and the end).
"""

from __future__ import annotations

import argparse
import hashlib
import io
import json
import os
import shlex
import shutil
import subprocess
import sys
import tarfile
import time
import traceback
from collections.abc import Callable
from pathlib import Path
from typing import Any

from . import oci

STAGES = ("machine", "install", "runc-probe", "containerd", "node", "images", "containers", "systemd-cgroup", "kubelet")
PKG = Path(__file__).resolve().parent
STATE = Path("/run/gpu-node-check")
OPT = Path("/opt/gpu-node-check")
WORK = Path("/var/tmp/gpu-node-check")
SOCK = "unix:///run/containerd/containerd.sock"
PAYLOAD_IMAGE = "gpu-node-check.local/payload:1"
FINAL_SPECS = Path("/var/tmp/gpu-node-check/final-specs")
NOBODY = 65534
WATCHED = (
    "/etc/containerd/config.toml",
    "/etc/containerd/conf.d/99-nvidia.toml",
    "/etc/nvidia-container-runtime/config.toml",
    "/var/run/cdi/nvidia.yaml",
    "/lib/udev/rules.d/71-nvidia-dev-char.rules",
)
TOOLKIT_BINARIES = ("nvidia-ctk", "nvidia-cdi-hook", "nvidia-container-runtime", "nvidia-container-runtime-hook")
SYSTEMD_CGROUP_TABLE = '[plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]\n  SystemdCgroup = true\n'
SYS_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"


CRI_TABLE = '[plugins."io.containerd.grpc.v1.cri"]'


def with_restricted_oom(config: str) -> str:
    """A containerd config with `restrict_oom_score_adj = true` in its CRI table (after the
    table's header where it has one, else a new table at the end)."""
    lines = config.splitlines()
    for i, line in enumerate(lines):
        if line.strip() == CRI_TABLE:
            indent = line[: len(line) - len(line.lstrip())] + "  "
            return "\n".join([*lines[: i + 1], f"{indent}restrict_oom_score_adj = true", *lines[i + 1:]]) + "\n"
    return config.rstrip("\n") + f"\n\n{CRI_TABLE}\n  restrict_oom_score_adj = true\n"


class Check:
    def __init__(self, bundle: Path, out: Path):
        self.bundle = bundle
        self.out = out
        out.mkdir(parents=True, exist_ok=True)
        self.text = (out / "gpu-node-check.txt").open("a")
        self.steps = (out / "steps.jsonl").open("a")
        self.facts: dict[str, Any] = {}
        self.failed: list[str] = []
        self.summary: list[str] = []
        self.meta_dir = bundle / "meta"
        self.meta = json.loads((self.meta_dir / "bundle.json").read_text())
        self.systemd = Path("/run/systemd/system").is_dir()
        self.path = SYS_PATH if self.systemd else f"{OPT / 'shim'}:{SYS_PATH}"

    # ------------------------------------------------------------------ output
    def say(self, line: str = "") -> None:
        print(line, flush=True)
        self.text.write(line + "\n")
        self.text.flush()

    def section(self, title: str) -> None:
        self.say(f"### {title}")

    def step(self, name: str, fn: Callable[[], dict[str, Any] | None]) -> dict[str, Any] | None:
        start = time.monotonic()
        ok, facts, error = True, None, None
        try:
            facts = fn()
            if facts and facts.get("ok") is False:
                ok = False
        except Exception as exc:  # a failed step is recorded; the stage goes on where it can
            ok, error = False, f"{type(exc).__name__}: {exc}"
            self.say(f"ERROR in {name}: {error}")
            self.text.write(traceback.format_exc())
        seconds = round(time.monotonic() - start, 2)
        line = {"step": name, "ok": ok, "seconds": seconds, **({"facts": facts} if facts else {}), **({"error": error} if error else {})}
        self.steps.write(json.dumps(line, sort_keys=True) + "\n")
        self.steps.flush()
        self.say(f"STEP {name}: {'ok' if ok else 'FAILED'} in {seconds} s")
        self.summary.append(f"{'ok    ' if ok else 'FAILED'} {seconds:8.2f} s  {name}")
        if not ok:
            self.failed.append(name)
        return facts

    def sh(self, args: list[str] | str, *, check: bool = True, timeout: float = 300, env: dict[str, str] | None = None,
           cwd: str | Path | None = None, show: int = 20, quiet: bool = False) -> subprocess.CompletedProcess[str]:
        shell = isinstance(args, str)
        shown = args if shell else " ".join(shlex.quote(a) for a in args)
        full_env = {"PATH": self.path, "HOME": str(Path.home()), "LC_ALL": "C", **(env or {})}
        proc = subprocess.run(args, shell=shell, capture_output=True, text=True, timeout=timeout, env=full_env, cwd=cwd)
        if not quiet:
            self.say(f"$ {shown}" + (f"   (exit {proc.returncode})" if proc.returncode else ""))
            lines = (proc.stdout + proc.stderr).rstrip("\n").splitlines()
            for ln in lines[:show]:
                self.say(f"  {ln}")
            if len(lines) > show:
                self.say(f"  ... {len(lines) - show} more line(s)")
        if check and proc.returncode != 0:
            raise RuntimeError(f"{shown} exited {proc.returncode}: {(proc.stderr or proc.stdout).strip()[-400:]}")
        return proc

    def crictl(self, *args: str, check: bool = True, quiet: bool = False, show: int = 20) -> subprocess.CompletedProcess[str]:
        return self.sh([str(OPT / "bin" / "crictl"), "-r", SOCK, "-i", SOCK, "--timeout", "60s", *args],
                       check=check, quiet=quiet, show=show)

    # ------------------------------------------------------------------ machine
    def machine(self) -> dict[str, Any]:
        self.section("machine")
        facts: dict[str, Any] = {}
        facts["kernel"] = self.sh(["uname", "-sr"]).stdout.strip()
        os_release = dict(line.split("=", 1) for line in Path("/etc/os-release").read_text().splitlines() if "=" in line)
        facts["os"] = os_release.get("PRETTY_NAME", "").strip('"')
        self.say(f"  os: {facts['os']}")
        q = self.sh(["nvidia-smi", "--query-gpu=name,driver_version,mig.mode.current,uuid,memory.total", "--format=csv,noheader"])
        facts["gpus"] = [ln.strip() for ln in q.stdout.splitlines() if ln.strip()]
        facts["pid1"] = Path("/proc/1/comm").read_text().strip()
        facts["systemd"] = self.systemd
        self.say(f"  PID 1: {facts['pid1']} (systemd running: {self.systemd})")
        facts["cgroup"] = self.sh(["stat", "-fc", "%T", "/sys/fs/cgroup"]).stdout.strip()
        ctl = Path("/sys/fs/cgroup/cgroup.controllers")
        facts["cgroup_controllers"] = ctl.read_text().strip() if ctl.exists() else ""
        self.say(f"  cgroup: {facts['cgroup']} ({facts['cgroup_controllers']})")
        nvcc = shutil.which("nvcc", path=f"{SYS_PATH}:/usr/local/cuda/bin")
        facts["nvcc"] = self.sh([nvcc, "--version"], quiet=True).stdout.strip().splitlines()[-1] if nvcc else None
        self.say(f"  nvcc: {nvcc} {facts['nvcc']}")
        facts["python"] = sys.version.split()[0]
        facts["dev_char_before"] = sorted(os.listdir("/dev/char")) if Path("/dev/char").is_dir() else None
        self.say(f"  /dev/char before: {len(facts['dev_char_before']) if facts['dev_char_before'] is not None else 'absent'} entries")
        self.sh("ls -l /dev/nvidia* 2>&1 | head -n 12", check=False)
        self.sh("ls -l /usr/bin/nvidia-smi; head -c 64 /usr/bin/nvidia-smi | tr -c '[:print:]' . ; echo", check=False)
        self.sh("df -h / /var | tail -n +2; nproc; free -g | head -n 2", check=False)
        self.facts["mig_before"] = self.mig_modes()
        return facts

    def mig_modes(self) -> str:
        return self.sh(["nvidia-smi", "--query-gpu=mig.mode.current", "--format=csv,noheader"], quiet=True).stdout.strip()

    # ------------------------------------------------------------------ install
    def install(self) -> dict[str, Any]:
        self.section("install: Debian's runc and containerd, the toolkit's binaries where its packages put them")
        debs = sorted((self.bundle / "debs").glob("*.deb"))
        names = [d.name for d in debs]
        self.say(f"  packages: {', '.join(names)}")
        want = {self.sh(["dpkg-deb", "-f", str(d), "Package"], quiet=True).stdout.strip():
                self.sh(["dpkg-deb", "-f", str(d), "Version"], quiet=True).stdout.strip() for d in debs}
        have = {}
        for pkg in want:
            q = self.sh(["dpkg-query", "-W", "-f", "${Version} ${db:Status-Status}", pkg], check=False, quiet=True).stdout.split()
            have[pkg] = q[0] if len(q) == 2 and q[1] == "installed" else None
        facts: dict[str, Any] = {"debs": names, "before": have}
        if have == want:
            self.say("  already installed (an earlier call on this machine)")
        else:
            proc = self.sh(["dpkg", "-i", *map(str, debs)], check=False, env={"DEBIAN_FRONTEND": "noninteractive"}, timeout=300)
            facts["dpkg_rc"] = proc.returncode
            if proc.returncode != 0:
                self.say("  dpkg -i failed; unpacking the packages' files instead (dpkg-deb -x)")
                for d in debs:
                    self.sh(["dpkg-deb", "-x", str(d), "/"])
                facts["unpacked_instead"] = True
        facts["containerd"] = self.sh(["containerd", "--version"]).stdout.strip()
        facts["runc"] = self.sh(["runc", "--version"]).stdout.strip().splitlines()[0]
        # the binaries of the toolchain: toolkit to /usr/bin, the rest to OPT/bin
        (OPT / "bin").mkdir(parents=True, exist_ok=True)
        tmp = WORK / "bin"
        tmp.mkdir(parents=True, exist_ok=True)
        for archive in sorted([*self.bundle.glob("bin/*.tar.xz"), *self.bundle.glob("kube/*.tar.xz")]):
            with tarfile.open(archive) as tar:
                tar.extractall(tmp, filter="data")  # our own archive (bundle.py)
        for name in sorted(os.listdir(tmp)):
            dest = Path("/usr/bin" if name in TOOLKIT_BINARIES else OPT / "bin") / name
            shutil.copyfile(tmp / name, dest)
            dest.chmod(0o755)
        self.say(f"  placed: {', '.join(sorted(os.listdir(tmp)))}")
        # nvidia-container-toolkit-base's postinst (packaging/debian/nvidia-container-toolkit-base.postinst),
        # on a fresh file (an earlier call's node script may have written it)
        Path(WATCHED[2]).unlink(missing_ok=True)
        self.sh(["nvidia-ctk", "--quiet", "config", "--config-file=/etc/nvidia-container-runtime/config.toml", "--in-place"])
        facts["nvidia_ctk"] = self.sh(["nvidia-ctk", "--version"]).stdout.strip().splitlines()[0]
        if (OPT / "bin" / "crictl").exists():
            facts["crictl"] = self.sh([str(OPT / "bin" / "crictl"), "--version"]).stdout.strip()
        return facts

    # ------------------------------------------------------------------ containerd
    def containerd(self) -> dict[str, Any]:
        self.section("containerd with its stock config")
        facts: dict[str, Any] = {"systemd": self.systemd}
        cfg = Path("/etc/containerd/config.toml")
        self.fresh_start()
        facts["stock_config"] = cfg.read_text() if cfg.exists() else None
        self.facts.setdefault("stock_config", facts["stock_config"])
        self.say("  /etc/containerd/config.toml as the package installed it:")
        for ln in (facts["stock_config"] or "(none)\n").splitlines():
            self.say(f"    {ln}")
        # containerd's CRI gives every pod sandbox oom_score_adj -998 (and the kubelet asks -997 for
        # Guaranteed pods); lowering it needs CAP_SYS_RESOURCE. Where root may not (a VM's or a
        # container's bounded root: runc then fails every sandbox, "nsexec: failed to update
        # /proc/self/oom_score_adj: Permission denied"), containerd's own setting for such hosts:
        # restrict_oom_score_adj (no lower than containerd's own), in the CRI table of config.toml.
        probe = self.sh("sh -c 'echo -998 > /proc/self/oom_score_adj'", check=False, quiet=True)
        facts["oom_lower_allowed"] = probe.returncode == 0
        self.facts["oom_lower_allowed"] = facts["oom_lower_allowed"]
        self.sh("grep -E '^Cap(Eff|Bnd)' /proc/self/status; cat /proc/self/oom_score_adj", check=False)
        if not facts["oom_lower_allowed"] and cfg.exists():
            text = cfg.read_text()
            if "restrict_oom_score_adj" not in text:
                cfg.write_text(with_restricted_oom(text))
                self.say(f"  root may not lower oom_score_adj here ({probe.stderr.strip()[-120:]}): "
                         f"{cfg} gets restrict_oom_score_adj = true in its CRI table")
        facts["base_config"] = cfg.read_text() if cfg.exists() else None
        self.facts["base_config"] = facts["base_config"]
        STATE.mkdir(parents=True, exist_ok=True)
        if not self.systemd:
            shim = OPT / "shim"
            shim.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(PKG / "systemctl-shim.sh", shim / "systemctl")
            (shim / "systemctl").chmod(0o755)
            self.say(f"  PID 1 is {Path('/proc/1/comm').read_text().strip()}, not systemd: `systemctl` is {shim}/systemctl "
                     "(start/restart/is-active of containerd as its unit does; nothing else)")
        self.sh(["systemctl", "start", "containerd"])
        self.wait_containerd()
        facts["version"] = self.sh(["ctr", "version"]).stdout.strip().splitlines()[-2:]
        facts["pid"] = self.containerd_pid()
        return facts

    def fresh_start(self) -> None:
        """What an earlier call on this machine left is undone first: containerd stopped, its
        config as the package ships it, no drop-in, CDI spec, udev rule or /dev/char links."""
        if self.systemd or (OPT / "shim" / "systemctl").exists():
            self.sh(["systemctl", "stop", "containerd"], check=False, quiet=True)
        deb = next(iter(sorted((self.bundle / "debs").glob("containerd_*.deb"))), None)
        if deb is not None:
            tmp = WORK / "stock"
            shutil.rmtree(tmp, ignore_errors=True)
            self.sh(["dpkg-deb", "-x", str(deb), str(tmp)], quiet=True)
            if (tmp / "etc/containerd/config.toml").exists():
                shutil.copyfile(tmp / "etc/containerd/config.toml", "/etc/containerd/config.toml")
        for f in (WATCHED[1], WATCHED[3], WATCHED[4]):
            Path(f).unlink(missing_ok=True)
        if Path("/dev/char").is_dir():
            for e in os.listdir("/dev/char"):
                if os.path.islink(f"/dev/char/{e}") and "nvidia" in os.readlink(f"/dev/char/{e}"):
                    os.unlink(f"/dev/char/{e}")

    def wait_containerd(self, limit: float = 60) -> None:
        end = time.monotonic() + limit
        while time.monotonic() < end:
            if self.sh(["ctr", "version"], check=False, quiet=True).returncode == 0:
                return
            time.sleep(0.5)
        log = STATE / "containerd.log"
        raise RuntimeError("containerd did not answer within 60 s" + (f": {log.read_text()[-800:]}" if log.exists() else ""))

    def containerd_pid(self) -> int | None:
        if self.systemd:
            out = self.sh(["systemctl", "show", "-p", "MainPID", "--value", "containerd"], check=False, quiet=True).stdout.strip()
            return int(out) if out.isdigit() and out != "0" else None
        pid = STATE / "containerd.pid"
        return int(pid.read_text()) if pid.exists() else None

    # ------------------------------------------------------------------ runc alone
    def runc_probe(self) -> dict[str, Any]:
        self.section("runc alone on a minimal bundle (which namespaces this kernel lets runc create)")
        for f in ("/proc/sys/vm/memfd_noexec", "/proc/sys/kernel/unprivileged_userns_clone", "/proc/sys/user/max_user_namespaces"):
            self.say(f"  {f}: {Path(f).read_text().strip() if Path(f).exists() else '(absent)'}")
        self.sh("ls -l /proc/self/ns/ | awk 'NR>1 {print $9, $11}'", check=False)
        for flags in ("-m", "-u", "-i", "-p -f", "-C", "-n", "-m -u -i -p -f -C"):
            self.sh(f"unshare {flags} true", check=False)
        bundle = WORK / "probe"
        shutil.rmtree(bundle, ignore_errors=True)
        (bundle / "rootfs").mkdir(parents=True)
        r = oci.Rootfs()
        for prog in ("/usr/bin/true", "/usr/bin/sleep"):
            self.add_program(r, prog)
        for d in ("/dev", "/proc", "/sys", "/tmp"):
            r.dir(d)
        with tarfile.open(fileobj=io.BytesIO(oci.layer_tar(r))) as tar:
            tar.extractall(bundle / "rootfs", filter="tar")
        self.sh(["runc", "spec", "--bundle", str(bundle)])
        spec = json.loads((bundle / "config.json").read_text())
        spec["process"]["terminal"] = False
        spec["process"]["args"] = ["/usr/bin/true"]
        base_ns = spec["linux"]["namespaces"]
        self.say(f"  runc spec namespaces: {[n['type'] for n in base_ns]}")
        runtimes: list[tuple[str, str, dict[str, str]]] = [("runc (installed)", "runc", {})]
        alt = WORK / "alt"
        shutil.rmtree(alt, ignore_errors=True)
        alt.mkdir(parents=True)
        for deb in sorted((self.bundle / "alt").glob("*.deb")):
            pkg = deb.name.split("_")[0]
            self.sh(["dpkg-deb", "-x", str(deb), str(alt / pkg)], quiet=True)
        if (alt / "runc" / "usr/sbin/runc").exists():
            runtimes.append(("runc (alt: " + next((self.bundle / "alt").glob("runc_*.deb")).name + ")", str(alt / "runc/usr/sbin/runc"), {}))
        if (alt / "crun" / "usr/bin/crun").exists():
            runtimes.append(("crun (alt: " + next((self.bundle / "alt").glob("crun_*.deb")).name + ")", str(alt / "crun/usr/bin/crun"),
                             {"LD_LIBRARY_PATH": str(alt / "libyajl2/usr/lib/x86_64-linux-gnu")}))
        results: dict[str, Any] = {}
        n = 0
        for label, binary, env in runtimes:
            variants: list[tuple[str, list[str], bool]] = [("default", [], False)]
            if label.startswith("runc (installed)"):
                variants += [(f"without {ns}", [ns], False) for ns in [x["type"] for x in base_ns if x["type"] != "mount"]]
                variants.append(("mount only", [x["type"] for x in base_ns if x["type"] != "mount"], False))
                variants.append(("no seccomp, masked or read-only paths", [], True))
            for name, drop, plain in variants:
                s2 = json.loads(json.dumps(spec))
                s2["linux"]["namespaces"] = [x for x in base_ns if x["type"] not in drop]
                if plain:
                    for key in ("maskedPaths", "readonlyPaths", "seccomp"):
                        s2["linux"].pop(key, None)
                (bundle / "config.json").write_text(json.dumps(s2))
                n += 1
                log = WORK / f"probe-{n}.log"
                proc = self.sh([binary, "--debug", f"--log={log}", "run", "--bundle", str(bundle), f"probe{n}"], check=False,
                               quiet=True, timeout=60, env=env)
                self.sh([binary, "delete", "-f", f"probe{n}"], check=False, quiet=True, env=env)
                lines = log.read_text(errors="replace").splitlines() if log.exists() else []
                tail = [ln for ln in lines if any(w in ln.lower() for w in ("error", "fatal", "nsexec", "fail"))] or lines
                results[f"{label} {name}"] = proc.returncode
                self.say(f"  {label}, {name}: exit {proc.returncode} {(proc.stdout + proc.stderr).strip()[-240:]}")
                for ln in tail[-5:]:
                    self.say(f"    log| {ln[:300]}")
        facts: dict[str, Any] = {"results": results}
        if results["runc (installed) default"] == 0:
            return facts
        working = next(((label, binary) for label, binary, _ in runtimes[1:] if results.get(f"{label} default") == 0), None)
        if working is None:
            self.say("  no OCI runtime of the bundle can start a container here")
            facts["ok"] = False
            return facts
        label, binary = working
        if label.startswith("crun"):
            self.sh(["dpkg", "-i", *map(str, sorted((self.bundle / "alt").glob("libyajl2_*.deb"))),
                     *map(str, sorted((self.bundle / "alt").glob("crun_*.deb")))], env={"DEBIAN_FRONTEND": "noninteractive"})
            binary = "/usr/bin/crun"
        dest = Path("/usr/local/sbin/runc")
        dest.parent.mkdir(parents=True, exist_ok=True)
        dest.unlink(missing_ok=True)
        if label.startswith("crun"):
            dest.symlink_to(binary)
        else:
            shutil.copyfile(binary, dest)
            dest.chmod(0o755)
        self.say(f"  Debian's runc cannot start a container here; {label} can: `runc` on PATH is now {dest} -> {binary}")
        self.sh(["runc", "--version"], check=False)
        facts["runc_replaced_by"] = label
        self.facts["runc_replaced_by"] = label
        return facts

    # ------------------------------------------------------------------ node
    def snapshot(self) -> dict[str, Any]:
        files = {}
        for f in WATCHED:
            p = Path(f)
            files[f] = hashlib.sha256(p.read_bytes()).hexdigest()[:16] if p.is_file() else None
        dev_char = sorted(os.listdir("/dev/char")) if Path("/dev/char").is_dir() else []
        links = {e: os.readlink(f"/dev/char/{e}") for e in dev_char if os.path.islink(f"/dev/char/{e}")}
        nvidia_links = {e: t for e, t in links.items() if "nvidia" in t}
        return {"files": files, "dev_char_nvidia": nvidia_links, "containerd_pid": self.containerd_pid(),
                "starts": (STATE / "containerd.starts").read_text().strip() if (STATE / "containerd.starts").exists() else None}

    def node(self, run: int, first: bool) -> dict[str, Any]:
        self.section(f"node script, run {run}: the stack's node command for {self.meta.get('node', '?')}, as the engine sends it")
        home = Path.home()
        script = home / ".gpu-stack-node-prep.sh"
        shutil.copyfile(self.meta_dir / "node-prep.sh", script)  # remote.CopyToRemote to the login directory
        create = (self.meta_dir / "node-command.txt").read_text()
        if first:
            self.say(f"  command ({len(create)} chars): {create[:300]}{' ...' if len(create) > 300 else ''}")
        before = self.snapshot()
        start = time.monotonic()
        proc = subprocess.run(["sh", "-c", create], cwd=home, capture_output=True, text=True, timeout=1500,
                              env={"PATH": self.path, "HOME": str(home), "LANG": "C.UTF-8", "USER": "root", "LOGNAME": "root"})
        seconds = round(time.monotonic() - start, 2)
        self.say(f"  exit {proc.returncode} in {seconds} s")
        for ln in proc.stdout.splitlines():
            self.say(f"  stdout| {ln}")
        for ln in proc.stderr.splitlines():
            self.say(f"  stderr| {ln}")
        log = (home / ".gpu-stack-node-prep.log")
        log_text = log.read_text() if log.exists() else ""
        (self.out / f"node-prep-run{run}.log").write_text(log_text)
        self.say("  the node's log (~/.gpu-stack-node-prep.log):")
        for ln in log_text.splitlines():
            if "Could not locate" in ln or "level=info msg=\"Creating link" in ln:
                continue  # folded below
            self.say(f"    {ln}")
        folded = sum("Could not locate" in ln for ln in log_text.splitlines())
        links = sum("Creating link" in ln for ln in log_text.splitlines())
        if folded or links:
            self.say(f"    [{folded} 'Could not locate' warnings of the CDI generator and {links} 'Creating link' lines folded]")
        self.wait_after_node()
        after = self.snapshot()
        changed = [f for f in WATCHED if before["files"][f] != after["files"][f]]
        new_links = sorted(set(after["dev_char_nvidia"]) - set(before["dev_char_nvidia"]))
        restarted = before["containerd_pid"] != after["containerd_pid"]
        self.say(f"  files changed: {changed or 'none'}")
        self.say(f"  /dev/char links to NVIDIA devices: {len(before['dev_char_nvidia'])} before, {len(after['dev_char_nvidia'])} after")
        self.say(f"  containerd pid {before['containerd_pid']} -> {after['containerd_pid']} (restarted: {restarted}; starts counted: {before['starts']} -> {after['starts']})")
        if not self.systemd and (STATE / "systemctl.log").exists():
            self.say("  systemctl calls so far: " + "; ".join(ln.split(" ", 1)[1] for ln in (STATE / "systemctl.log").read_text().splitlines()[-6:]))
        report = next((ln for ln in proc.stdout.splitlines() if ln.startswith("GPU_STACK_PREFLIGHT ")), None)
        facts = {
            "rc": proc.returncode, "seconds": seconds, "changed": changed, "new_dev_char_links": len(new_links),
            "restarted": restarted, "preflight": json.loads(report.split(" ", 1)[1]) if report else None,
            "summary": proc.stderr.strip().splitlines()[-1] if proc.stderr.strip() else "",
            "ok": proc.returncode == 0 and (restarted if first else not changed and not restarted and not new_links),
        }
        return facts

    def wait_after_node(self) -> bool:
        try:
            self.wait_containerd()
            return True
        except RuntimeError as exc:
            self.say(f"  containerd is not answering after the node script: {exc}")
            return False

    def runtime_view(self) -> dict[str, Any]:
        self.section("what containerd now runs with")
        dump = self.sh(["containerd", "config", "dump"], quiet=True).stdout
        (self.out / "containerd-config-dump.toml").write_text(dump)
        keep = [ln for ln in dump.splitlines() if any(k in ln for k in (
            "enable_cdi", "cdi_spec_dirs", "default_runtime_name", "runtimes.nvidia", "runtimes.runc]", "BinaryName",
            "SystemdCgroup", "sandbox_image", "imports", "snapshotter ="))]
        for ln in keep:
            self.say(f"  {ln.strip()}")
        for f in ("/etc/containerd/config.toml", "/etc/containerd/conf.d/99-nvidia.toml"):
            if Path(f).exists():
                (self.out / Path(f).name.replace(".toml", "-after.toml")).write_text(Path(f).read_text())
        self.sh("grep -nE '^[[:space:]]*(accept-nvidia|mode|root) ' /etc/nvidia-container-runtime/config.toml", check=False)
        self.sh(["nvidia-ctk", "cdi", "list"], check=False)
        sandbox = next((ln.split("=", 1)[1].strip().strip('"') for ln in keep if "sandbox_image" in ln), "registry.k8s.io/pause:3.8")
        self.facts["sandbox_image"] = sandbox
        return {"enable_cdi": any("enable_cdi = true" in ln for ln in keep), "nvidia_runtime": any("runtimes.nvidia" in ln for ln in keep),
                "sandbox_image": sandbox}

    # ------------------------------------------------------------------ images
    def images(self) -> dict[str, Any]:
        self.section("OCI images from this machine's files (no registry)")
        WORK.mkdir(parents=True, exist_ok=True)
        nvcc = shutil.which("nvcc", path=f"{SYS_PATH}:/usr/local/cuda/bin")
        if not nvcc:
            raise RuntimeError("no nvcc on this machine: vectorAdd (config/validation/vector-add.cu) cannot be built")
        vector_add = WORK / "vectorAdd"
        start = time.monotonic()
        self.sh([nvcc, "-O2", "-o", str(vector_add), str(self.meta_dir / "payloads" / "vector-add.cu")], timeout=300)
        build_s = round(time.monotonic() - start, 2)
        payload = oci.Rootfs()
        # bash and the coreutils, grep and sed a payload may call (gpu-common.sh, cuda-smoke.sh, ...)
        programs = ["/bin/bash", "/bin/sh", "/sbin/ldconfig"] + [
            f"/usr/bin/{p}" for p in ("grep", "sed", "tail", "head", "dirname", "basename", "ls", "cat", "env", "sleep", "id",
                                      "date", "touch", "mkdir", "rm", "tr", "cut", "sort", "wc", "uname", "timeout", "getent",
                                      "printf", "seq", "mktemp") if os.path.exists(f"/usr/bin/{p}")]
        for p in ("/sbin/ldconfig.real", "/etc/ld.so.conf"):
            if os.path.exists(p):
                programs.append(p)
        for prog in programs:
            self.add_program(payload, prog)
        if Path("/etc/ld.so.conf.d").is_dir():
            for f in sorted(Path("/etc/ld.so.conf.d").iterdir()):
                oci.add_host_path(payload, str(f))
        payload.file("/cuda-samples/vectorAdd", str(vector_add), 0o755)
        self.add_libs(payload, str(vector_add))
        # what the driver's own binaries and libraries (mounted by CDI) load from the image: glibc's
        # compatibility libraries, and the libraries of a wrapped nvidia-smi's real binary
        for lib in ("libpthread.so.0", "libdl.so.2", "librt.so.1", "libm.so.6", "libresolv.so.2"):
            for d in ("/lib/x86_64-linux-gnu", "/usr/lib/x86_64-linux-gnu"):
                if os.path.exists(f"{d}/{lib}"):
                    oci.add_host_path(payload, f"{d}/{lib}")
                    break
        real_smi = self.wrapped_smi()
        if real_smi:
            self.add_libs(payload, real_smi)
        for d in ("/dev", "/proc", "/sys", "/payloads", "/etc/cdi", "/run", "/var/run"):
            if d not in payload.entries:
                payload.dir(d)
        payload.dir("/tmp", 0o1777)
        payload.text("/etc/passwd", "root:x:0:0:root:/root:/bin/bash\nnobody:x:65534:65534:nobody:/nonexistent:/usr/sbin/nologin\n")
        payload.text("/etc/group", "root:x:0:\nnogroup:x:65534:\n")
        # as NVIDIA's CUDA images set them: every container of such an image names all GPUs
        env = [f"PATH={SYS_PATH}", "NVIDIA_VISIBLE_DEVICES=all", "NVIDIA_DRIVER_CAPABILITIES=compute,utility"]
        pause = oci.Rootfs()
        self.add_program(pause, "/usr/bin/sleep")
        sandbox = self.facts.get("sandbox_image") or "registry.k8s.io/pause:3.8"
        facts: dict[str, Any] = {"nvcc_build_s": build_s}
        for name, rootfs, image_env, entrypoint, cmd in (
            (PAYLOAD_IMAGE, payload, env, None, ["bash"]),
            (sandbox, pause, [f"PATH={SYS_PATH}"], ["/usr/bin/sleep", "infinity"], None),
        ):
            t = time.monotonic()
            files = oci.image_layout(rootfs, name, env=image_env, entrypoint=entrypoint, cmd=cmd)
            data = oci.layout_tar(files)
            path = WORK / (name.replace("/", "_").replace(":", "_") + ".tar")
            path.write_bytes(data)
            manifest = json.loads(files["index.json"])["manifests"][0]["digest"]
            self.say(f"  {name}: {len(rootfs.entries)} entries, {len(data) // 1024} KiB, manifest {manifest[:19]}... ({round(time.monotonic() - t, 2)} s)")
            self.sh(["ctr", "-n", "k8s.io", "images", "import", "--platform", "linux/amd64", str(path)])
            facts[name] = {"entries": len(rootfs.entries), "kib": len(data) // 1024, "manifest": manifest}
        self.crictl("images")
        return facts

    def add_libs(self, rootfs: oci.Rootfs, program: str) -> None:
        out = self.sh(["ldd", program], check=False, quiet=True).stdout
        for lib in oci.ldd_paths(out):
            oci.add_host_path(rootfs, lib)

    def add_program(self, rootfs: oci.Rootfs, program: str) -> None:
        oci.add_host_path(rootfs, program)
        if not program.startswith("/etc/"):
            self.add_libs(rootfs, program)

    # ------------------------------------------------------------------ containers
    def payload_dirs(self) -> tuple[Path, Path]:
        """The payloads where user nobody can read them, and a writable /tmp."""
        payloads = WORK / "payloads"
        if payloads.exists():
            shutil.rmtree(payloads)
        shutil.copytree(self.meta_dir / "payloads", payloads)
        for p in [WORK, payloads, *payloads.iterdir()]:
            p.chmod(0o755 if p.is_dir() else 0o644)
        tmp = WORK / "tmp"
        tmp.mkdir(exist_ok=True)
        tmp.chmod(0o1777)
        return payloads, tmp

    def wrapped_smi(self) -> str | None:
        """Where /usr/bin/nvidia-smi is a script that execs the real binary elsewhere (the H200 VM:
        a 524-byte wrapper execing /usr/local/nvidia/bin/nvidia-smi), that binary: the CDI spec
        mounts only /usr/bin/nvidia-smi, so GPU containers get the real one mounted beside it."""
        smi = Path("/usr/bin/nvidia-smi")
        try:
            text = smi.read_bytes()[:4096]
        except OSError:
            return None
        if not text.startswith(b"#!"):
            return None
        for word in text.decode(errors="replace").replace('"', " ").replace("'", " ").split():
            if word.startswith("/") and word.endswith("/nvidia-smi") and word != str(smi) and Path(word).is_file():
                return word
        return None

    def run_pod(self, name: str, script: str, env: dict[str, str], *, handler: str | None = None,
                cdi_devices: list[str] | None = None, annotations: dict[str, str] | None = None) -> dict[str, Any]:
        payloads, tmp = self.payload_dirs()
        cfgdir = WORK / "cri" / name
        cfgdir.mkdir(parents=True, exist_ok=True)
        logdir = Path("/var/log/gpu-node-check") / name
        shutil.rmtree(logdir, ignore_errors=True)  # containerd appends to a log path it finds
        logdir.mkdir(parents=True, exist_ok=True)
        pod = {
            "metadata": {"name": name, "namespace": "gpu-node-check", "uid": f"{name}-{int(time.time())}", "attempt": 0},
            "log_directory": str(logdir),
            "linux": {"security_context": {"namespace_options": {"network": 2}}},  # NODE: no CNI needed
        }
        container: dict[str, Any] = {
            "metadata": {"name": name},
            "image": {"image": PAYLOAD_IMAGE},
            "command": ["bash", f"/payloads/{script}"],
            "envs": [{"key": k, "value": v} for k, v in {"CHECK_NAME": name, **env}.items()],
            "mounts": [{"container_path": "/payloads", "host_path": str(payloads), "readonly": True},
                       {"container_path": "/tmp", "host_path": str(tmp)}],
            "log_path": f"{name}.log",
            "annotations": annotations or {},
            # the validation Jobs' security context (gpu_stack/design/validation/manifests.py)
            "linux": {"security_context": {
                "run_as_user": {"value": NOBODY}, "run_as_group": {"value": NOBODY}, "readonly_rootfs": True,
                "no_new_privs": True, "capabilities": {"drop_capabilities": ["ALL"]}, "seccomp": {"profile_type": 0}}},
        }
        if cdi_devices:
            container["CDI_devices"] = [{"name": d} for d in cdi_devices]
        real_smi = self.wrapped_smi()
        if real_smi and (cdi_devices or annotations):
            container["mounts"].append({"container_path": real_smi, "host_path": real_smi, "readonly": True})
        (cfgdir / "pod.json").write_text(json.dumps(pod, indent=1))
        (cfgdir / "container.json").write_text(json.dumps(container, indent=1))
        self.say(f"  pod {name}: runtime handler {handler or '(default: runc)'}, CDI devices {cdi_devices or 'none'}, "
                 f"annotations {annotations or 'none'}, env {env}")
        t0 = time.monotonic()
        pod_id = self.crictl("runp", *(["--runtime", handler] if handler else []), str(cfgdir / "pod.json"), quiet=True).stdout.strip()
        ctr_id = ""
        result: dict[str, Any] = {"name": name}
        try:
            ctr_id = self.crictl("create", "--no-pull", pod_id, str(cfgdir / "container.json"), str(cfgdir / "pod.json"), quiet=True).stdout.strip()
            self.crictl("start", ctr_id, quiet=True)
            state: dict[str, Any] = {}
            end = time.monotonic() + 180
            while time.monotonic() < end:
                state = json.loads(self.crictl("inspect", "-o", "json", ctr_id, quiet=True).stdout)
                if state["status"]["state"] == "CONTAINER_EXITED":
                    break
                time.sleep(0.3)
            result["exit_code"] = state["status"].get("exitCode")
            result["reason"] = state["status"].get("reason")
            spec = (state.get("info") or {}).get("runtimeSpec") or {}
            result["devices"] = [d["path"] for d in (spec.get("linux") or {}).get("devices") or []]
            final = FINAL_SPECS / f"{ctr_id}.json"
            if final.exists():  # what runc got, after the nvidia runtime's changes (runc-wrapper.sh)
                fspec = json.loads(final.read_text())
                result["final_devices"] = [d["path"] for d in (fspec.get("linux") or {}).get("devices") or []]
                result["final_nvidia_mounts"] = [m["destination"] for m in fspec.get("mounts") or [] if "nvidia" in m.get("destination", "")]
            result["hooks"] = sorted({h.get("path", "") + " " + " ".join(h.get("args", [])[1:2]) for hs in (spec.get("hooks") or {}).values() for h in hs})
            logs = self.crictl("logs", ctr_id, check=False, quiet=True)
            result["log"] = (logs.stdout + logs.stderr).strip().splitlines()
        finally:
            result["seconds"] = round(time.monotonic() - t0, 2)
            self.crictl("stopp", pod_id, check=False, quiet=True)
            self.crictl("rmp", "-f", pod_id, check=False, quiet=True)
        self.say(f"    exit {result.get('exit_code')} ({result.get('reason')}) in {result['seconds']} s; device nodes in containerd's OCI spec: "
                 f"{result.get('devices') or 'none'}; in the spec runc got: {result.get('final_devices', '?') or 'none'}"
                 f" (NVIDIA mounts: {len(result.get('final_nvidia_mounts') or [])})")
        if result.get("hooks"):
            self.say(f"    hooks: {result['hooks']}")
        for ln in result.get("log", [])[-14:]:
            self.say(f"    | {ln}")
        verdict = [ln for ln in result.get("log", []) if ln.startswith(("PASS ", "FAIL "))]
        result["verdict"] = verdict[-1] if verdict else None
        return result

    def containers(self) -> dict[str, Any]:
        self.section("containers through containerd's CRI (crictl)")
        # runc as every runtime finds it on PATH, wrapped to keep the final spec of each container
        FINAL_SPECS.mkdir(parents=True, exist_ok=True)
        wrapper = Path("/usr/local/sbin/runc")
        if not wrapper.exists():
            wrapper.parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(PKG / "runc-wrapper.sh", wrapper)
            wrapper.chmod(0o755)
            self.say(f"  {wrapper}: {PKG / 'runc-wrapper.sh'} (keeps the OCI spec runc gets; then execs /usr/sbin/runc)")
        node_class = f"{self.meta.get('model', 'GPU')} on {self.meta.get('node', 'this node')}"
        out: dict[str, Any] = {}

        def expect(result: dict[str, Any], passed: bool) -> dict[str, Any]:
            result["ok"] = (result.get("exit_code") == 0) == passed and (result.get("verdict") or "").startswith("PASS" if passed else "FAIL")
            self.say(f"    => {'as expected' if result['ok'] else 'NOT as expected'}: {result.get('verdict')}")
            return result

        smoke = {"EXPECTED_GPUS": "1", "VECTOR_ADD": "/cuda-samples/vectorAdd"}
        out["gpu-cdi-field"] = self.step("container: the GPU by CDI (CRI CDIDevices, default runtime runc): cuda-smoke.sh",
                                         lambda: expect(self.run_pod("gpu-cdi-field", "cuda-smoke.sh", smoke, cdi_devices=["nvidia.com/gpu=0"]), True))
        out["gpu-cdi-annotation"] = self.step(
            "container: the GPU by CDI (cdi.k8s.io/ annotation, default runtime runc): cuda-smoke.sh",
            lambda: expect(self.run_pod("gpu-cdi-annotation", "cuda-smoke.sh", smoke,
                                        annotations={"cdi.k8s.io/gpu-node-check": "nvidia.com/gpu=0"}), True))
        out["no-gpu-default"] = self.step("container: no GPU asked for (default runtime runc): no-gpu.sh",
                                          lambda: expect(self.run_pod("no-gpu-default", "no-gpu.sh", {"NODE_CLASS": node_class}), True))
        out["no-gpu-nvidia"] = self.step(
            "container: nvidia runtime, NVIDIA_VISIBLE_DEVICES=all, unprivileged, the stack's isolation: no-gpu.sh",
            lambda: expect(self.run_pod("no-gpu-nvidia", "no-gpu.sh", {"NODE_CLASS": node_class, "NVIDIA_VISIBLE_DEVICES": "all"},
                                        handler="nvidia"), True))
        config = Path("/etc/nvidia-container-runtime/config.toml")
        saved = config.read_bytes()
        try:
            self.sh(["nvidia-ctk", "config", f"--config-file={config}", "--in-place",
                     "--set=accept-nvidia-visible-devices-envvar-when-unprivileged=true"], quiet=True)
            out["contrast"] = self.step(
                "container: the same under the toolkit's default (envvar accepted): no-gpu.sh must fail",
                lambda: expect(self.run_pod("no-gpu-nvidia-open", "no-gpu.sh", {"NODE_CLASS": node_class, "NVIDIA_VISIBLE_DEVICES": "all"},
                                            handler="nvidia"), False))
        finally:
            config.write_bytes(saved)
            self.say("  the toolkit config is back as the node script left it")
        return {"ok": all((v or {}).get("ok") for v in out.values())}

    # ------------------------------------------------------------------ systemd cgroups
    def systemd_cgroup(self) -> dict[str, Any]:
        self.section("the node script on a systemd-cgroup node (SystemdCgroup = true in config.toml, as kubeadm sets it)")
        if self.snapshot()["dev_char_nvidia"] and Path(WATCHED[4]).exists():
            self.say("  the first runs made the /dev/char links already: nothing to add")
            return {"skipped": True}
        keep = {f: Path(f).read_bytes() for f in WATCHED[:2] if Path(f).exists()}
        stock = self.facts.get("base_config")
        if stock is None:
            raise RuntimeError("the stock containerd config was not recorded (the containerd stage did not run)")
        try:
            Path(WATCHED[1]).unlink(missing_ok=True)
            Path(WATCHED[0]).write_text(stock.rstrip("\n") + "\n\n" + SYSTEMD_CGROUP_TABLE)
            self.sh(["systemctl", "restart", "containerd"])
            self.wait_containerd()
            self.say(f"  {WATCHED[0]}: the stock file plus {SYSTEMD_CGROUP_TABLE.strip()!r}; no drop-in; containerd restarted")
            first = self.node(3, True)
            second = self.node(4, False)
        finally:
            for f in WATCHED[:2]:
                if f in keep:
                    Path(f).write_bytes(keep[f])
                else:
                    Path(f).unlink(missing_ok=True)
            self.sh(["systemctl", "restart", "containerd"])
            self.wait_containerd()
            self.say("  containerd's files are back as the first runs left them (cgroupfs); containerd restarted")
        return {"ok": bool(first.get("ok") and second.get("ok") and first.get("new_dev_char_links")),
                "run3": {k: first.get(k) for k in ("rc", "changed", "new_dev_char_links", "restarted", "seconds")},
                "run4": {k: second.get(k) for k in ("rc", "changed", "new_dev_char_links", "restarted", "seconds")}}

    # ------------------------------------------------------------------ kubelet (see kubelet.py)
    def kubelet(self) -> dict[str, Any]:
        from . import kubelet

        return kubelet.run(self)

    # ------------------------------------------------------------------ main
    def main(self, stages: list[str]) -> int:
        self.say(f"# gpu-node-check {time.strftime('%Y-%m-%d %H:%M:%S UTC', time.gmtime())}; bundle: {json.dumps(self.meta, sort_keys=True)}")
        for stage in stages:
            if stage in ("images", "containers", "kubelet") and "sandbox_image" not in self.facts:
                self.step("containerd config", self.runtime_view)
            if stage == "node":
                self.step("node script, run 1", lambda: self.node(1, True))
                self.step("containerd config after the node script", self.runtime_view)
                self.step("node script, run 2 (must change nothing, restart nothing)", lambda: self.node(2, False))
            elif stage == "containers":
                self.containers()
            else:
                self.step(stage, getattr(self, stage.replace("-", "_")))
        after = self.mig_modes() if shutil.which("nvidia-smi") else ""
        self.say(f"MIG mode before: {self.facts.get('mig_before', '?')}; after: {after} (never changed by this check)")
        self.section("summary")
        for line in self.summary:
            self.say(line)
        self.say(f"DONE: {len(self.failed)} failed step(s){': ' + '; '.join(self.failed) if self.failed else ''}")
        return 1 if self.failed else 0


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--bundle", type=Path, required=True)
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--stages", default=",".join(s for s in STAGES if s != "kubelet"), help=f"comma-separated, of {','.join(STAGES)}")
    args = ap.parse_args(argv)
    if os.geteuid() != 0:
        print("gpu-node-check: run as root (it installs packages and starts containerd)", file=sys.stderr)
        return 2
    stages = [s for s in args.stages.split(",") if s]
    unknown = sorted(set(stages) - set(STAGES))
    if unknown:
        ap.error(f"unknown stage(s): {unknown}")
    return Check(args.bundle.resolve(), args.out.resolve()).main(stages)


if __name__ == "__main__":
    sys.exit(main())
