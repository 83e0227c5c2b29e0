"""Channels and retries: which channels a client opens for its targets, the gRPC service
config (round_robin, retries with exponential backoff), the channel options, and the
per-address stubs of the dataset calls that must reach every address (fan-out).

Both clients use this; ``api`` is ``grpc`` for the blocking one, ``grpc.aio`` for asyncio.
"""

from __future__ import annotations

import ipaddress
import itertools
import json
import socket
from typing import Any, Dict, List, Optional, Sequence, Tuple

import grpc

from gpusampler import _health
from gpusampler.v1 import sampler_pb2_grpc as pb_grpc


def service_config_json(
    max_attempts: int, initial_backoff: float, max_backoff: float, multiplier: float = 2.0
) -> str:
    """The gRPC service config: round_robin over all addresses, and retries with
    exponential backoff on UNAVAILABLE and RESOURCE_EXHAUSTED (gRFC A6)."""
    method: Dict[str, Any] = {
        "name": [{"service": "gpusampler.v1.Sampler"}, {"service": "grpc.health.v1.Health"}]
    }
    if max_attempts >= 2:
        method["retryPolicy"] = {
            "maxAttempts": int(max_attempts),
            "initialBackoff": f"{initial_backoff:.6f}s",
            "maxBackoff": f"{max_backoff:.6f}s",
            "backoffMultiplier": multiplier,
            "retryableStatusCodes": ["UNAVAILABLE", "RESOURCE_EXHAUSTED"],
        }
    return json.dumps({"loadBalancingConfig": [{"round_robin": {}}], "methodConfig": [method]})


def listed_addresses(target: str) -> Optional[List[str]]:
    """The addresses of one ``ipv4:a,b,c`` / ``ipv6:a,b`` target of several addresses, each
    as a target of its own (``ipv4:a``); None for any other target."""
    for scheme in ("ipv4:", "ipv6:"):
        if target.startswith(scheme):
            parts = [p for p in target[len(scheme):].split(",") if p]
            return [scheme + p for p in parts] if len(parts) >= 2 else None
    return None


def channel_targets(targets: Sequence[str]) -> List[str]:
    """Several IPv4 (or several IPv6) ``host:port`` literals become one ``ipv4:`` / ``ipv6:``
    target that the channel balances with round_robin; anything else is one channel each."""
    targets = list(targets)
    if len(targets) < 2:
        return targets

    def family(t: str) -> int:
        host = t.rsplit(":", 1)[0] if ":" in t else ""
        try:
            return ipaddress.ip_address(host.strip("[]")).version
        except ValueError:
            return 0

    families = {family(t) for t in targets}
    if len(families) == 1 and 0 not in families:
        return [("ipv4:" if 4 in families else "ipv6:") + ",".join(targets)]
    return targets


def channel_options(
    *,
    max_message_bytes: int,
    max_attempts: int,
    initial_backoff: float,
    max_backoff: float,
    keepalive_time: Optional[float],
    keepalive_timeout: float,
    server_name_override: Optional[str],
    options: Sequence[Tuple[str, Any]],
) -> List[Tuple[str, Any]]:
    """The options of every channel: retries, message limits, keepalive, then the
    caller's own ``options``."""
    out: List[Tuple[str, Any]] = [
        ("grpc.service_config", service_config_json(max_attempts, initial_backoff, max_backoff)),
        ("grpc.enable_retries", 1 if max_attempts >= 2 else 0),
        # Requests larger than the retry buffer (256 KiB by default) cannot be retried.
        ("grpc.per_rpc_retry_buffer_size", max_message_bytes),
        ("grpc.max_send_message_length", max_message_bytes),
        ("grpc.max_receive_message_length", max_message_bytes),
    ]
    if keepalive_time is not None:
        out += [
            ("grpc.keepalive_time_ms", int(keepalive_time * 1000)),
            ("grpc.keepalive_timeout_ms", int(keepalive_timeout * 1000)),
            # Only while calls are open: idle connections stay quiet.
            ("grpc.keepalive_permit_without_calls", 0),
        ]
    if server_name_override:
        out.append(("grpc.ssl_target_name_override", server_name_override))
    out.extend(options)
    return out


def credentials(tls: bool, root_certificates: Optional[bytes], private_key: Optional[bytes],
                certificate_chain: Optional[bytes]) -> Optional[grpc.ChannelCredentials]:
    """TLS credentials (None: plaintext): asked for, or implied by certificates given."""
    if tls or root_certificates or certificate_chain:
        return grpc.ssl_channel_credentials(
            root_certificates=root_certificates,
            private_key=private_key,
            certificate_chain=certificate_chain,
        )
    return None


def dns_host_port(target: str) -> Optional[Tuple[str, int]]:
    """(host, port) of a target that names a host by DNS ("name:port", "dns:///name:port");
    None for IP literals, other schemes (ipv4:, ipv6:, unix:) and targets without a port."""
    if target.startswith("dns:///"):
        target = target[len("dns:///"):]
    elif ":" in target.split("/")[0] and target.split(":", 1)[0] in ("ipv4", "ipv6", "unix",
                                                                     "unix-abstract", "vsock",
                                                                     "dns"):
        return None
    if target.startswith("["):
        return None  # an IPv6 literal
    host, sep, port = target.rpartition(":")
    if not sep or not host or not port.isdigit():
        return None
    try:
        ipaddress.ip_address(host)
        return None
    except ValueError:
        return host, int(port)


class Connection:
    """A client's channels and stubs. Calls rotate over the channels; the dataset calls
    that must reach every address given get one stub per address (``address_stubs``)."""

    def __init__(self, api: Any, targets: List[str], options: List[Tuple[str, Any]],
                 creds: Optional[grpc.ChannelCredentials]) -> None:
        self._api = api
        self._options = options
        self._credentials = creds
        self.targets = targets
        self._channels = [self._new_channel(t) for t in channel_targets(targets)]
        self._stubs = [pb_grpc.SamplerStub(c) for c in self._channels]
        self._health = [_health.stub(c) for c in self._channels]
        self._next = itertools.count()
        # One channel per address given, for the dataset calls that must reach each of them
        # (made on first use, when several IP literals share one balanced channel).
        self._address_channels: List[Any] = []
        self._address_stubs: Optional[List[Any]] = None
        # A single DNS target's addresses (resolved_stubs), one channel each, kept by address.
        self._resolved: Dict[str, Tuple[Any, Any]] = {}

    def _new_channel(self, target: str) -> Any:
        if self._credentials is not None:
            return self._api.secure_channel(target, self._credentials, options=self._options)
        return self._api.insecure_channel(target, options=self._options)

    def stub(self) -> Any:
        """The Sampler stub of the next channel in turn."""
        return self._stubs[next(self._next) % len(self._stubs)]

    def health_stub(self) -> Any:
        """The grpc.health.v1 stub of the next channel in turn."""
        return self._health[next(self._next) % len(self._health)]

    def channels(self) -> List[Any]:
        """Every channel opened, for closing."""
        return self._channels + self._address_channels + [c for c, _ in self._resolved.values()]

    def resolved_stubs(self) -> Optional[List[Tuple[str, Any]]]:
        """When the client has one target and it is a DNS name of several addresses (a
        headless Service over the replicas), or one ``ipv4:a,b,c`` / ``ipv6:`` list of
        several addresses: each address with a stub that reaches it alone,
        resolved now (replicas come and go). None for one address, an IP literal, a unix
        socket, a target gRPC resolves itself in another scheme, or a name that does not
        resolve here (the call then fails on its own channel, with gRPC's message)."""
        if len(self.targets) != 1:
            return None
        host: Optional[str] = None
        addresses = listed_addresses(self.targets[0])
        if addresses is None:
            hostport = dns_host_port(self.targets[0])
            if hostport is None:
                return None
            host, port = hostport
            try:
                infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
            except (OSError, UnicodeError):
                return None
            addresses = []
            for family, _, _, _, sockaddr in infos:
                ip = str(sockaddr[0])
                address = (f"ipv6:[{ip}]:{port}" if family == socket.AF_INET6 else
                           f"ipv4:{ip}:{port}")
                if address not in addresses:
                    addresses.append(address)
        if len(addresses) < 2:
            return None
        out: List[Tuple[str, Any]] = []
        for address in addresses:
            if address not in self._resolved:
                # TLS: the certificate names the DNS name, not the address.
                options = list(self._options)
                if self._credentials is not None and host is not None:
                    options.append(("grpc.ssl_target_name_override", host))
                channel = (self._api.secure_channel(address, self._credentials, options=options)
                           if self._credentials is not None else
                           self._api.insecure_channel(address, options=options))
                self._resolved[address] = (channel, pb_grpc.SamplerStub(channel))
            out.append((address.split(":", 1)[1], self._resolved[address][1]))
        return out

    def address_stubs(self) -> List[Tuple[str, Any]]:
        """Every address given, with a stub that reaches that address alone."""
        if self._address_stubs is None:
            if channel_targets(self.targets) == self.targets:
                self._address_stubs = list(self._stubs)
            else:
                self._address_channels = [self._new_channel(t) for t in self.targets]
                self._address_stubs = [pb_grpc.SamplerStub(c) for c in self._address_channels]
        return list(zip(self.targets, self._address_stubs))
