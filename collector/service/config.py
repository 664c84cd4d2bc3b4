"""The collector's configuration: ``CollectorConfig``, every value checked when it is made.

What each setting means, its default and bounds are in the option table (``option_table.py``); here are the fields (each
takes its default from its row) and the checks that span several settings.
"""

from __future__ import annotations

import argparse
import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from ringtrace.collector.auth import is_loopback
from ringtrace.collector.service.machine_memory import memory_bytes
from ringtrace.collector.service.option_fields import check_setting, field_default, option_of
from ringtrace.collector.service.option_flags import settings_from_args
from ringtrace.collector.store.ring import MIN_SEGMENT_BYTES, Policy
from ringtrace.collector.store.segment_buffers import FsyncPolicy
from ringtrace.wire.errors import ConfigError

__all__ = ["CollectorConfig", "config_from_args"]


def declared(name: str) -> Any:
    """The dataclass field ``name``, as its row in the option table declares it (default; a secret out of the repr)."""
    return dataclasses.field(default=field_default(name), repr=not option_of(name).secret)


@dataclass(frozen=True)
class CollectorConfig:
    """What the collector is told: each field is a row of ``option_table.OPTIONS`` (its meaning, flag and bounds).

    Raises:
        ConfigError: a value out of its row's bounds or choices; TLS half given; a listener beyond loopback without a
            token (unless ``insecure_open``); a capacity that cannot hold two of the largest frames.
    """

    tcp_host: str = declared("tcp_host")
    tcp_port: int = declared("tcp_port")
    http_host: str = declared("http_host")
    http_port: int = declared("http_port")
    otlp_http: tuple[str, int] | None = declared("otlp_http")
    otlp_grpc: tuple[str, int] | None = declared("otlp_grpc")
    otlp_max_body_bytes: int = declared("otlp_max_body_bytes")
    otlp_max_connections: int = declared("otlp_max_connections")
    otlp_max_processes: int = declared("otlp_max_processes")
    otlp_max_span_events: int = declared("otlp_max_span_events")
    capacity_bytes: int = declared("capacity_bytes")
    process_capacity_bytes: int | None = declared("process_capacity_bytes")
    policy: Policy = declared("policy")  # noqa: RUF009 - a dataclasses.field (a Literal type is not known immutable)
    data_dir: str | None = declared("data_dir")
    fsync: FsyncPolicy = declared("fsync")  # noqa: RUF009 - as above
    segment_bytes: int | None = declared("segment_bytes")
    max_age_s: float | None = declared("max_age_s")
    incidents_dir: str | None = declared("incidents_dir")
    incidents_max_count: int = declared("incidents_max_count")
    incidents_max_bytes: int = declared("incidents_max_bytes")
    jetstream: tuple[str, ...] | None = declared("jetstream")
    jetstream_stream: str = declared("jetstream_stream")
    jetstream_replicas: int = declared("jetstream_replicas")
    jetstream_storage: str = declared("jetstream_storage")
    jetstream_buffer_bytes: int = declared("jetstream_buffer_bytes")
    jetstream_creds: str | None = declared("jetstream_creds")
    jetstream_token: str | None = declared("jetstream_token")
    jetstream_tls_ca: str | None = declared("jetstream_tls_ca")
    jetstream_tls_cert: str | None = declared("jetstream_tls_cert")
    jetstream_tls_key: str | None = declared("jetstream_tls_key")
    max_frame_bytes: int = declared("max_frame_bytes")
    max_connections: int = declared("max_connections")
    max_connections_per_address: int | None = declared("max_connections_per_address")
    idle_timeout_s: float = declared("idle_timeout_s")
    max_snapshots: int = declared("max_snapshots")
    http_timeout_s: float = declared("http_timeout_s")
    max_http_connections: int = declared("max_http_connections")
    max_strings: int = declared("max_strings")
    max_tracks: int = declared("max_tracks")
    max_kinds: int = declared("max_kinds")
    max_stacks: int = declared("max_stacks")
    max_stack_frames: int = declared("max_stack_frames")
    max_string_bytes: int = declared("max_string_bytes")
    max_schema_bytes: int = declared("max_schema_bytes")
    handshake_timeout_s: float = declared("handshake_timeout_s")
    snapshot_flush_timeout_s: float = declared("snapshot_flush_timeout_s")
    forget_after_s: float = declared("forget_after_s")
    token: str | None = declared("token")
    tls_cert: str | None = declared("tls_cert")
    tls_key: str | None = declared("tls_key")
    insecure_open: bool = declared("insecure_open")
    rules: str | None = declared("rules")
    triggers: tuple[str, ...] | None = declared("triggers")
    incident_capacity_bytes: int | None = declared("incident_capacity_bytes")

    def _check_no_jetstream_option(self) -> None:
        """An option of the JetStream store given without it would do nothing, in silence."""
        for field in dataclasses.fields(self):
            if field.name.startswith("jetstream_") and getattr(self, field.name) != field_default(field.name):
                flag = option_of(field.name).flag or field.name
                raise ConfigError(
                    f"{flag} needs --jetstream (the NATS servers): without it the store is in memory or --data-dir"
                )

    def _check_capacity_fits_memory(self) -> None:
        """An in-memory ring (and the incidents' budget beside it) larger than the memory the collector can have is
        ended by the kernel as it fills."""
        memory = memory_bytes()
        needed = self.capacity_bytes + self.effective_incident_capacity_bytes
        if memory is not None and needed > memory:
            raise ConfigError(
                f"--capacity: {self.capacity_bytes} bytes, with --incident-capacity's "
                f"{self.effective_incident_capacity_bytes} beside it (a quarter of it unless given), is more than the "
                f"memory this collector can have ({memory} bytes: the machine's, or a control group's limit): the "
                "in-memory store would be ended by the kernel as it filled. Give a smaller --capacity, or --data-dir "
                "to keep the ring on disk"
            )

    def __post_init__(self) -> None:
        for field in dataclasses.fields(self):
            check_setting(field.name, getattr(self, field.name))
        if (self.tls_cert is None) != (self.tls_key is None):
            raise ConfigError("--tls-cert and --tls-key go together: give both (the certificate chain and its key)")
        if (self.jetstream_tls_cert is None) != (self.jetstream_tls_key is None):
            raise ConfigError("--jetstream-tls-cert and --jetstream-tls-key go together: give both")
        if self.jetstream and self.data_dir is not None:
            raise ConfigError("--jetstream and --data-dir are two stores: give one (the stream keeps what it holds)")
        if not self.jetstream:
            self._check_no_jetstream_option()
        exposed = self.exposed_listeners
        if exposed and self.token is None and not self.insecure_open:
            raise ConfigError(
                f"refusing to listen on {' and '.join(exposed)} without a token: beyond loopback anyone who reaches "
                "the port could send events or read every trace. Give a token (--token-file FILE, or "
                "RINGTRACE_TOKEN; clients pass it too) and TLS (--tls-cert FILE --tls-key FILE) unless the network "
                "is trusted; or, if a firewall or a private network already guards these ports, --insecure-open"
            )
        if self.data_dir is None and not self.jetstream:
            self._check_capacity_fits_memory()
        frames = 2 * (self.max_frame_bytes + MIN_SEGMENT_BYTES)
        for name in ("capacity_bytes", "process_capacity_bytes"):
            value = getattr(self, name)
            if value is not None and value < frames:
                flag = option_of(name).flag
                raise ConfigError(
                    f"{flag}: capacity of {value} bytes must hold at least 2 frames of --max-frame-size "
                    f"{self.max_frame_bytes} with their session frames ({frames} bytes): give {flag} "
                    f"{-(-frames // 10**6)}MB or more, or a smaller --max-frame-size"
                )

    @property
    def exposed_listeners(self) -> list[str]:
        """The listeners bound beyond loopback, as ``FLAG HOST``."""
        listen_hosts = {option_of("tcp_host").flag: self.tcp_host, option_of("http_host").flag: self.http_host}
        for name in ("otlp_http", "otlp_grpc"):
            address = getattr(self, name)
            if address is not None:
                listen_hosts[option_of(name).flag] = address[0]
        return [f"{flag} {host}" for flag, host in listen_hosts.items() if not is_loopback(host)]

    @property
    def effective_incident_capacity_bytes(self) -> int:
        """``--incident-capacity``, or a quarter of the capacity: incidents then take at most a quarter more memory
        than the ring, however the ring turns over while they collect."""
        return self.incident_capacity_bytes if self.incident_capacity_bytes is not None else self.capacity_bytes // 4

    @property
    def effective_segment_bytes(self) -> int:
        if self.segment_bytes is not None:
            return self.segment_bytes
        smallest = min(self.capacity_bytes, self.process_capacity_bytes or self.capacity_bytes)
        return min(max(smallest // 8, MIN_SEGMENT_BYTES), 4 * 1024 * 1024)


def config_from_args(args: argparse.Namespace, environ: Mapping[str, str]) -> CollectorConfig:
    """The configuration the parsed flags (and ``RINGTRACE_TOKEN``) say, checked; nothing is bound yet.

    Raises:
        ConfigError: a value is refused (a token file that cannot be read, a listener beyond loopback without a
            token, ...); the message says which and why.
    """
    return CollectorConfig(**settings_from_args(args, environ))
