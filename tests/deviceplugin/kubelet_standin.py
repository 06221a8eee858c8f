"""A stand-in kubelet for the device-plugin API v1beta1: what a real kubelet does with a device
plugin up to the first container that gets a device, and nothing else.

1. serves `Registration.Register` on `<dir>/kubelet.sock` (the socket a plugin dials; it checks
   the API version and the resource name the way the kubelet does);
2. for each registration, dials `<dir>/<endpoint>` and calls `GetDevicePluginOptions`, reads the
   first `ListAndWatch` response (the devices the node would advertise), asks
   `GetPreferredAllocation` for one device when the plugin offers it, and `Allocate`s that device
   (what the container runtime would be told); then `Allocate` for two devices, which a plugin
   that fails requests greater than one must refuse.

Runs under any Python with grpcio and the stubs of `stubs.py` (a folder of generated modules), so
it also runs on a GPU machine that has no grpcio-tools:

    python3 -m tests.deviceplugin.kubelet_standin --dir /var/lib/kubelet/device-plugins --stubs DIR
"""

from __future__ import annotations

import argparse
import json
import queue
import re
import sys
import threading
from concurrent import futures
from pathlib import Path
from typing import Any

import grpc

from . import stubs

API_VERSIONS = ("v1beta1",)
"""The device-plugin API versions the kubelet 1.31-1.34 accepts."""
KUBELET_SOCKET = "kubelet.sock"

# An extended resource name: a DNS-subdomain prefix (not kubernetes.io) and a qualified name.
_PREFIX = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
_NAME = re.compile(r"^([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]$")


def resource_name_problem(name: str) -> str | None:
    """Why the kubelet would refuse `name` as an extended resource, or None."""
    prefix, sep, rest = name.partition("/")
    if not sep or not prefix or not rest:
        return f"{name!r} is not of the form <domain>/<name>"
    if prefix == "kubernetes.io" or prefix.endswith(".kubernetes.io") or prefix == "requests":
        return f"{name!r} uses a reserved prefix"
    if len(prefix) > 253 or not _PREFIX.match(prefix):
        return f"{name!r}: prefix {prefix!r} is not a DNS subdomain"
    if len(rest) > 63 or not _NAME.match(rest):
        return f"{name!r}: {rest!r} is not a qualified name (at most 63 characters, alphanumeric at both ends)"
    return None


class StandInKubelet:
    """The registration server and, per registered plugin, the kubelet's side of the plugin API."""

    def __init__(self, plugin_dir: Path, stubs_dir: Path) -> None:
        self.dir = plugin_dir
        self.pb, self.grpc_mod = stubs.load(stubs_dir)
        self.registrations: queue.Queue[Any] = queue.Queue()
        self.refused: list[str] = []
        self._server: grpc.Server | None = None

    @property
    def socket(self) -> Path:
        return self.dir / KUBELET_SOCKET

    def start(self) -> None:
        self.dir.mkdir(parents=True, exist_ok=True)
        self.socket.unlink(missing_ok=True)
        kubelet = self

        class Registration(self.grpc_mod.RegistrationServicer):  # type: ignore[name-defined,misc]
            def Register(self, request: Any, context: grpc.ServicerContext) -> Any:  # the gRPC name
                problem = None
                if request.version not in API_VERSIONS:
                    problem = f"unsupported API version {request.version!r} (supported: {', '.join(API_VERSIONS)})"
                else:
                    problem = resource_name_problem(request.resource_name)
                if problem:
                    kubelet.refused.append(problem)
                    context.abort(grpc.StatusCode.INVALID_ARGUMENT, problem)
                kubelet.registrations.put(request)
                return kubelet.pb.Empty()

        self._server = grpc.server(futures.ThreadPoolExecutor(max_workers=4))
        self.grpc_mod.add_RegistrationServicer_to_server(Registration(), self._server)
        self._server.add_insecure_port(f"unix://{self.socket}")
        self._server.start()

    def stop(self) -> None:
        if self._server is not None:
            self._server.stop(grace=None)
            self._server = None
        self.socket.unlink(missing_ok=True)

    def wait_registration(self, timeout: float) -> Any:
        """The next RegisterRequest; raises queue.Empty after `timeout` seconds."""
        return self.registrations.get(timeout=timeout)

    def exercise(self, request: Any, timeout: float = 30) -> dict[str, Any]:
        """What the kubelet learns from a registered plugin, as plain data."""
        from google.protobuf.json_format import MessageToDict

        def plain(msg: Any) -> dict[str, Any]:
            return MessageToDict(msg, preserving_proto_field_name=True)

        result: dict[str, Any] = {"registered": plain(request)}
        endpoint = self.dir / request.endpoint
        with grpc.insecure_channel(f"unix://{endpoint}") as channel:
            grpc.channel_ready_future(channel).result(timeout=timeout)
            plugin = self.grpc_mod.DevicePluginStub(channel)
            options = plugin.GetDevicePluginOptions(self.pb.Empty(), timeout=timeout)
            result["options"] = plain(options)
            stream = plugin.ListAndWatch(self.pb.Empty(), timeout=timeout)
            first = _first(stream, timeout)
            stream.cancel()
            devices = [plain(d) for d in first.devices]
            result["devices"] = devices
            ids = [d["ID"] for d in devices]
            if not ids:
                return result
            chosen = ids[:1]
            if options.get_preferred_allocation_available:
                preferred = plugin.GetPreferredAllocation(
                    self.pb.PreferredAllocationRequest(container_requests=[
                        self.pb.ContainerPreferredAllocationRequest(available_deviceIDs=ids, allocation_size=1)
                    ]),
                    timeout=timeout,
                )
                chosen = list(preferred.container_responses[0].deviceIDs) or chosen
                result["preferred"] = chosen
            answer = plugin.Allocate(
                self.pb.AllocateRequest(container_requests=[self.pb.ContainerAllocateRequest(devices_ids=chosen)]),
                timeout=timeout,
            )
            result["allocate"] = plain(answer.container_responses[0])
            if len(ids) > 1:
                try:
                    two = plugin.Allocate(
                        self.pb.AllocateRequest(container_requests=[self.pb.ContainerAllocateRequest(devices_ids=ids[:2])]),
                        timeout=timeout,
                    )
                    result["allocate_two"] = {"granted": plain(two.container_responses[0])}
                except grpc.RpcError as err:
                    result["allocate_two"] = {"refused": f"{err.code().name}: {err.details()}"}
        return result


def _first(stream: Any, timeout: float) -> Any:
    """The first message of a server stream, or TimeoutError after `timeout` seconds."""
    box: queue.Queue[Any] = queue.Queue()
    threading.Thread(target=lambda: box.put(next(stream)), daemon=True).start()
    try:
        return box.get(timeout=timeout)
    except queue.Empty:
        raise TimeoutError(f"no ListAndWatch response in {timeout} s") from None


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--dir", type=Path, default=Path("/var/lib/kubelet/device-plugins"))
    parser.add_argument("--stubs", type=Path, required=True, help="folder of api_pb2.py and api_pb2_grpc.py")
    parser.add_argument("--timeout", type=float, default=60, help="seconds to wait for a registration")
    parser.add_argument("--plugins", type=int, default=1, help="registrations to wait for")
    args = parser.parse_args(argv)
    kubelet = StandInKubelet(args.dir, args.stubs)
    kubelet.start()
    try:
        results = [kubelet.exercise(kubelet.wait_registration(args.timeout)) for _ in range(args.plugins)]
    except queue.Empty:
        print(json.dumps({"error": f"no registration in {args.timeout} s", "refused": kubelet.refused}))
        return 1
    finally:
        kubelet.stop()
    for r in results:
        print(json.dumps(r, sort_keys=True))
    return 0


if __name__ == "__main__":
    sys.exit(main())
