"""OCI images from local files, with nothing but the standard library (the GPU machine's python3).

A root filesystem is a list of entries (directories, files copied from the host, symlinks), one
uncompressed layer tar of them (sorted, owned by root, mtime 0: the same files give the same
digest), and an image layout (`oci-layout`, `index.json`, `blobs/sha256/...`) as the OCI image
spec v1.1 describes it (image-layout.md, manifest.md, config.md), packed as one tar that
`ctr images import` reads. The image's name is the index entry's `io.containerd.image.name`
annotation (containerd's importer takes the full name from it, the `org.opencontainers.image.ref.name`
one as the tag), so no registry is involved.

Which host files a program needs (`ldd_paths`, `host_entries`) follows symlinks the way the loader
does, keeping every link on the way: on a merged-/usr host `/lib64/ld-linux-x86-64.so.2` is a link
through `/lib64 -> usr/lib64` to `/usr/lib/x86_64-linux-gnu/ld-linux-x86-64.so.2`, and the image
holds the same links.
"""

from __future__ import annotations

import hashlib
import io
import json
import os
import re
import tarfile
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath

MEDIA_INDEX = "application/vnd.oci.image.index.v1+json"
MEDIA_MANIFEST = "application/vnd.oci.image.manifest.v1+json"
MEDIA_CONFIG = "application/vnd.oci.image.config.v1+json"
MEDIA_LAYER = "application/vnd.oci.image.layer.v1.tar"
NAME_ANNOTATION = "io.containerd.image.name"
REF_ANNOTATION = "org.opencontainers.image.ref.name"


@dataclass(frozen=True)
class Entry:
    """One path of the root filesystem: kind dir, file (content from `source`) or symlink (`target`)."""

    path: str
    kind: str
    source: str | None = None
    target: str | None = None
    mode: int = 0o755


@dataclass
class Rootfs:
    entries: dict[str, Entry] = field(default_factory=dict)

    def add(self, entry: Entry) -> None:
        path = _clean(entry.path)
        parent = PurePosixPath(path).parent
        while str(parent) not in ("/", "."):
            self.entries.setdefault(str(parent), Entry(str(parent), "dir"))
            parent = parent.parent
        self.entries[path] = Entry(path, entry.kind, entry.source, entry.target, entry.mode)

    def dir(self, path: str, mode: int = 0o755) -> None:
        self.add(Entry(path, "dir", mode=mode))

    def file(self, path: str, source: str, mode: int | None = None) -> None:
        self.add(Entry(path, "file", source=source, mode=mode if mode is not None else os.stat(source).st_mode & 0o7777))

    def text(self, path: str, content: str, mode: int = 0o644) -> None:
        """A file whose content is given (kept in `target`)."""
        self.add(Entry(path, "text", target=content, mode=mode))

    def symlink(self, path: str, target: str) -> None:
        self.add(Entry(path, "symlink", target=target))


def _clean(path: str) -> str:
    p = str(PurePosixPath("/") / path)
    if ".." in PurePosixPath(p).parts:
        raise ValueError(f"path leaves the root: {path}")
    return p


def layer_tar(rootfs: Rootfs) -> bytes:
    """The layer: every entry in path order, uid/gid 0, mtime 0 (reproducible)."""
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.PAX_FORMAT) as tar:
        for path in sorted(rootfs.entries):
            e = rootfs.entries[path]
            info = tarfile.TarInfo(path.lstrip("/"))
            info.mtime = 0
            info.uid = info.gid = 0
            info.uname = info.gname = "root"
            info.mode = e.mode
            if e.kind == "dir":
                info.type = tarfile.DIRTYPE
                tar.addfile(info)
            elif e.kind == "symlink":
                info.type = tarfile.SYMTYPE
                info.linkname = e.target or ""
                info.mode = 0o777
                tar.addfile(info)
            else:
                data = (e.target or "").encode() if e.kind == "text" else Path(e.source or "").read_bytes()
                info.size = len(data)
                tar.addfile(info, io.BytesIO(data))
    return buf.getvalue()


def _blob(blobs: dict[str, bytes], data: bytes) -> str:
    digest = "sha256:" + hashlib.sha256(data).hexdigest()
    blobs[digest] = data
    return digest


def _json(obj: object) -> bytes:
    return json.dumps(obj, sort_keys=True, separators=(",", ":")).encode()


def image_layout(
    rootfs: Rootfs, name: str, *, entrypoint: list[str] | None = None, cmd: list[str] | None = None,
    env: Iterable[str] = (), workdir: str = "/", arch: str = "amd64",
) -> dict[str, bytes]:
    """The image layout's files, by their path in the layout (`blobs/sha256/<hex>`, `index.json`, `oci-layout`)."""
    blobs: dict[str, bytes] = {}
    layer = layer_tar(rootfs)
    layer_digest = _blob(blobs, layer)
    config: dict[str, object] = {
        "architecture": arch,
        "os": "linux",
        "config": {"Env": list(env), "WorkingDir": workdir},
        "rootfs": {"type": "layers", "diff_ids": [layer_digest]},  # uncompressed: the diff id is the digest
        "history": [{"created_by": "sandbox/gpu_node_check/oci.py", "empty_layer": False}],
    }
    if entrypoint is not None:
        config["config"]["Entrypoint"] = entrypoint  # type: ignore[index]
    if cmd is not None:
        config["config"]["Cmd"] = cmd  # type: ignore[index]
    config_bytes = _json(config)
    config_digest = _blob(blobs, config_bytes)
    manifest = {
        "schemaVersion": 2,
        "mediaType": MEDIA_MANIFEST,
        "config": {"mediaType": MEDIA_CONFIG, "digest": config_digest, "size": len(config_bytes)},
        "layers": [{"mediaType": MEDIA_LAYER, "digest": layer_digest, "size": len(layer)}],
    }
    manifest_bytes = _json(manifest)
    manifest_digest = _blob(blobs, manifest_bytes)
    tag = name.rsplit(":", 1)[1] if ":" in name.rsplit("/", 1)[-1] else "latest"
    index = {
        "schemaVersion": 2,
        "mediaType": MEDIA_INDEX,
        "manifests": [{
            "mediaType": MEDIA_MANIFEST,
            "digest": manifest_digest,
            "size": len(manifest_bytes),
            "platform": {"architecture": arch, "os": "linux"},
            "annotations": {NAME_ANNOTATION: name, REF_ANNOTATION: tag},
        }],
    }
    files = {f"blobs/sha256/{d.split(':', 1)[1]}": data for d, data in blobs.items()}
    files["index.json"] = _json(index)
    files["oci-layout"] = _json({"imageLayoutVersion": "1.0.0"})
    return files


def layout_tar(files: dict[str, bytes]) -> bytes:
    """The layout as one tar (what `ctr images import` reads), directories first."""
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.PAX_FORMAT) as tar:
        for d in ("blobs", "blobs/sha256"):
            info = tarfile.TarInfo(d)
            info.type, info.mode, info.mtime = tarfile.DIRTYPE, 0o755, 0
            tar.addfile(info)
        for path in sorted(files):
            info = tarfile.TarInfo(path)
            info.size, info.mode, info.mtime = len(files[path]), 0o644, 0
            tar.addfile(info, io.BytesIO(files[path]))
    return buf.getvalue()


_LDD_ARROW = re.compile(r"^\s*\S+\s+=>\s+(/\S+)\s+\(0x[0-9a-f]+\)\s*$")
_LDD_PLAIN = re.compile(r"^\s*(/\S+)\s+\(0x[0-9a-f]+\)\s*$")


def ldd_paths(output: str) -> list[str]:
    """The absolute paths of the libraries `ldd` lists (the vDSO and `not found` lines left out)."""
    out: list[str] = []
    for line in output.splitlines():
        m = _LDD_ARROW.match(line) or _LDD_PLAIN.match(line)
        if m and m.group(1) not in out:
            out.append(m.group(1))
    return out


def host_entries(path: str, root: str = "/") -> list[Entry]:
    """The entries that make `path` of the host (under `root`) exist in an image: each symlink met
    on the way (directory links included), then the file itself."""
    out: list[Entry] = []
    seen: set[str] = set()
    pending = [_clean(path)]
    while pending:
        p = pending.pop()
        parts = PurePosixPath(p).parts[1:]
        current = PurePosixPath("/")
        resolved = True
        for i, part in enumerate(parts):
            current = current / part
            host = os.path.join(root, str(current).lstrip("/"))
            if os.path.islink(host):
                target = os.readlink(host)
                if str(current) not in seen:
                    seen.add(str(current))
                    out.append(Entry(str(current), "symlink", target=target))
                base = PurePosixPath(target) if target.startswith("/") else current.parent / target
                rest = PurePosixPath(*parts[i + 1:]) if i + 1 < len(parts) else None
                pending.append(os.path.normpath(str(base / rest) if rest else str(base)))
                resolved = False
                break
        if resolved and str(current) not in seen:
            seen.add(str(current))
            host = os.path.join(root, str(current).lstrip("/"))
            if os.path.isdir(host):
                out.append(Entry(str(current), "dir"))
            else:
                out.append(Entry(str(current), "file", source=host, mode=os.stat(host).st_mode & 0o7777))
    return out


def add_host_path(rootfs: Rootfs, path: str, root: str = "/") -> None:
    for e in host_entries(path, root):
        if e.kind == "symlink" and e.path in rootfs.entries and rootfs.entries[e.path].kind == "symlink":
            continue
        rootfs.add(e)
