"""Credentials of a deployment, made once and kept (``a2amesh deploy init``): one NATS and one Valkey user per
process kind and per agent, the gateway's API keys, optionally a TLS CA, and the server files made from them.

The folder holds two kinds of files. Secrets (passwords, API keys, the CA's key) are random, made when missing
and kept afterwards, unless rotated by name. Derived files (the NATS configuration, the Valkey ACL file, the
gateway's key list, the Kubernetes Secrets) are written again from the secrets on every run, so adding an agent
and running ``init`` again gives it its users without touching anyone else's. docs/deploy.md (Security).
"""

from __future__ import annotations

import datetime as dt
import hashlib
import ipaddress
import os
import secrets
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from a2amesh.access import GATEWAY, ROLES, NatsAccess, accounts_config, valkey_acl
from a2amesh.errors import UsageError

NATS_CONF = "nats.conf"
"""The whole server configuration: listener, monitoring, JetStream, then ``include`` of :data:`NATS_ACCOUNTS`."""
NATS_ACCOUNTS = "nats-accounts.conf"
"""The users and their permissions (passwords inside), and the ``tls`` block with ``--tls``."""
VALKEY_ACL = "valkey.acl"
API_KEYS = "api-keys"
"""The gateway's ``A2AMESH_API_KEYS``: ids, SHA-256 digests and scopes (no key)."""
KUBERNETES = "kubernetes-secrets.yaml"
TLS_DIR = "tls"
API_KEY_SCOPES = {"demo": "read|run|review", "admin": "admin"}
"""The gateway's keys: ``demo`` calls agents and reads, runs and reviews executions; ``admin`` also writes
definitions (SCOPES of gateway/settings.py)."""
SERVER_UID = 10001
"""The uid and gid every image runs as (services/*/Dockerfile, deploy/nats, deploy/valkey)."""
TLS_HOSTS = ("nats", "nats-2", "nats-3", "localhost", "127.0.0.1")
"""Names the NATS server certificate is valid for: the compose services, and the host's loopback."""


def nats_password_file(user: str) -> str:
    return f"nats-{user}.password"


def redis_password_file(user: str) -> str:
    return f"redis-{user}.password"


def api_key_file(key_id: str) -> str:
    return f"api-{key_id}.key"


def kubernetes_name(user: str) -> str:
    """The Secret holding one process's credentials (Kubernetes names have no ``_``)."""
    return f"a2amesh-{user.replace('_', '-').lower()}"


@dataclass
class InitReport:
    """What one run made: secrets created, rotated and kept, and the derived files written."""

    created: list[str] = field(default_factory=list)
    rotated: list[str] = field(default_factory=list)
    kept: list[str] = field(default_factory=list)
    written: list[str] = field(default_factory=list)
    owner: tuple[int, int] | None = None


@dataclass
class DeployInit:
    """Make or refresh the folder ``folder`` for a mesh of ``agents`` in ``namespace``.

    Args:
        folder: where every file goes (made 0700).
        namespace: the mesh's namespace (subjects and keys the users are limited to).
        agents: the agents' names, each a NATS and a Valkey user.
        rotate: names whose secrets are made anew: a user (its NATS and Valkey passwords), ``api-demo`` or
            ``api-admin`` (a gateway key), ``tls`` (the CA and the server certificate).
        tls: make a CA and a NATS server certificate, and turn TLS on in the NATS configuration.
        tls_hosts: extra names or addresses the server certificate is valid for.
        tls_path: the folder the NATS server finds the certificate in (the compose file mounts ``tls/`` there).
        kubernetes: also write the Kubernetes Secrets (:data:`KUBERNETES`).
        owner: uid and gid the files the containers read are given (default: the images' 10001 when run as
            root, else the caller's; see docs/deploy.md).
    """

    folder: Path
    namespace: str
    agents: list[str]
    rotate: list[str] = field(default_factory=list)
    tls: bool = False
    tls_hosts: list[str] = field(default_factory=list)
    tls_path: str = f"/etc/nats/{TLS_DIR}"
    kubernetes: bool = False
    owner: tuple[int, int] | None = None

    @property
    def users(self) -> list[str]:
        return [*ROLES, *self.agents]

    def rotatable(self) -> list[str]:
        return [*self.users, *(f"api-{k}" for k in API_KEY_SCOPES), "tls"]

    def run(self) -> InitReport:
        """Make what is missing, rotate what was asked, write the derived files.

        Raises:
            UsageError: an unknown name to rotate, or a folder that cannot be written.
        """
        unknown = [n for n in self.rotate if n not in self.rotatable()]
        if unknown:
            raise UsageError(f"nothing to rotate named {', '.join(unknown)}; one of: {', '.join(self.rotatable())}")
        if "tls" in self.rotate and not self.tls:
            raise UsageError("--rotate tls makes the CA anew: give --tls too")
        access = NatsAccess(namespace=self.namespace, agents=self.agents)  # validates the names
        report = InitReport(owner=self._owner())
        try:
            self.folder.mkdir(parents=True, exist_ok=True, mode=0o700)
            self.folder.chmod(0o700)
            nats: dict[str, str] = {}
            redis: dict[str, str] = {}
            for user in self.users:
                nats[user] = self._secret(nats_password_file(user), user, report, container=True)
                redis[user] = self._secret(redis_password_file(user), user, report, container=True)
            keys = {k: self._secret(api_key_file(k), f"api-{k}", report, container=False) for k in API_KEY_SCOPES}
            tls: dict[str, str] = {}
            if self.tls:
                tls = self._certificates(report)
                access = NatsAccess(
                    namespace=self.namespace,
                    agents=self.agents,
                    tls_cert=f"{self.tls_path}/nats-server.pem",
                    tls_key=f"{self.tls_path}/nats-server-key.pem",
                )
            self._derived(NATS_ACCOUNTS, accounts_config(access, nats), report)
            self._derived(NATS_CONF, nats_server_config(), report)
            hashes = {u: hashlib.sha256(p.encode()).hexdigest() for u, p in redis.items()}
            self._derived(VALKEY_ACL, valkey_acl(self.namespace, self.agents, hashes), report)
            self._derived(API_KEYS, api_keys_value(keys), report)
            if self.kubernetes:
                text = kubernetes_secrets(self, nats, redis, keys, tls, self._read(NATS_ACCOUNTS))
                self._derived(KUBERNETES, text, report, container=False)
        except OSError as e:
            raise UsageError(f"{self.folder}: cannot write the deployment's files: {e.strerror}") from e
        return report

    def _owner(self) -> tuple[int, int] | None:
        if self.owner is not None:
            return self.owner
        if hasattr(os, "geteuid") and os.geteuid() == 0:
            return (SERVER_UID, SERVER_UID)
        return None

    def _read(self, name: str) -> str:
        return (self.folder / name).read_text()

    def _secret(self, name: str, rotate_as: str, report: InitReport, *, container: bool) -> str:
        path = self.folder / name
        if path.exists() and rotate_as not in self.rotate:
            report.kept.append(name)
            return path.read_text().strip()
        value = secrets.token_urlsafe(32)
        (report.rotated if path.exists() else report.created).append(name)
        self._write(path, value + "\n", container=container)
        return value

    def _derived(self, name: str, text: str, report: InitReport, *, container: bool = True) -> None:
        path = self.folder / name
        if path.exists() and path.read_text() == text:
            self._protect(path, container=container)
            return
        self._write(path, text, container=container)
        report.written.append(name)

    def _write(self, path: Path, text: str | bytes, *, container: bool) -> None:
        """Write ``path`` readable by its owner only: the containers' uid for what they read (when known)."""
        tmp = path.with_name(f".{path.name}.tmp")
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "wb") as f:
            f.write(text.encode() if isinstance(text, str) else text)
        self._protect(tmp, container=container)
        tmp.replace(path)

    def _protect(self, path: Path, *, container: bool) -> None:
        path.chmod(0o600)
        owner = self._owner()
        if container and owner is not None and hasattr(os, "chown"):
            os.chown(path, *owner)

    def _certificates(self, report: InitReport) -> dict[str, str]:
        """The CA (kept, like a secret) and the NATS server certificate signed by it: their PEM texts."""
        folder = self.folder / TLS_DIR
        folder.mkdir(exist_ok=True, mode=0o700)
        names = {n: folder / f"{n}.pem" for n in ("ca", "ca-key", "nats-server", "nats-server-key")}
        rotate = "tls" in self.rotate
        if all(p.exists() for p in names.values()) and not rotate:
            report.kept.append(TLS_DIR)
        else:
            pems = make_certificates([*TLS_HOSTS, *self.tls_hosts])
            for n, pem in pems.items():
                self._write(names[n], pem, container=n != "ca-key")
            (report.rotated if rotate else report.created).append(TLS_DIR)
        # everyone may read the CA certificate (it is public); the server's key is the server's only
        names["ca"].chmod(0o644)
        return {n: p.read_text() for n, p in names.items()}


def nats_server_config() -> str:
    """The server settings of docker-compose.yml's NATS (as deploy/nats-jetstream.conf), then the users."""
    return (
        "# made by a2amesh deploy init: the users and their permissions are in nats-accounts.conf\n"
        "listen: 0.0.0.0:4222\n"
        "max_payload: 8MB\n"
        "http_port: 8222\n"
        "jetstream {\n"
        '  store_dir: "/data/jetstream"\n'
        "  sync_interval: always\n"
        "}\n"
        f"include ./{NATS_ACCOUNTS}\n"
    )


def api_keys_value(keys: dict[str, str]) -> str:
    """``A2AMESH_API_KEYS`` for the gateway: each key hashed, with its scopes."""
    entries = [f"{k}=sha256:{hashlib.sha256(v.encode()).hexdigest()}#{API_KEY_SCOPES[k]}" for k, v in keys.items()]
    return ",".join(entries) + "\n"


def kubernetes_secrets(
    init: DeployInit,
    nats: dict[str, str],
    redis: dict[str, str],
    keys: dict[str, str],
    tls: dict[str, str],
    accounts: str,
) -> str:
    """One Secret per process (its NATS and Valkey passwords; the gateway's also its API key list), one for
    the NATS server (its users), one for Valkey (its ACL file), and the CA with ``--tls``."""
    docs: list[dict[str, Any]] = []

    def secret(name: str, data: dict[str, str], what: str) -> None:
        labels = {"app.kubernetes.io/part-of": "a2amesh", "a2amesh.dev/for": what}
        meta = {"name": name, "labels": labels}
        docs.append({"apiVersion": "v1", "kind": "Secret", "metadata": meta, "type": "Opaque", "stringData": data})

    for user in init.users:
        data = {"nats-password": nats[user], "redis-password": redis[user]}
        if user == GATEWAY:
            data["api-keys"] = api_keys_value(keys).strip()
        secret(kubernetes_name(user), data, user.replace("_", "-"))
    server = {NATS_ACCOUNTS: accounts}
    if tls:
        server |= {"nats-server.pem": tls["nats-server"], "nats-server-key.pem": tls["nats-server-key"]}
    secret("a2amesh-nats-server", server, "nats")
    hashes = {u: hashlib.sha256(p.encode()).hexdigest() for u, p in redis.items()}
    secret("a2amesh-valkey-acl", {"users.acl": valkey_acl(init.namespace, init.agents, hashes)}, "valkey")
    if tls:
        secret("a2amesh-tls-ca", {"ca.pem": tls["ca"]}, "clients")
    head = "# made by a2amesh deploy init: apply with kubectl apply -f, never commit (docs/deploy.md)\n"
    return head + yaml.safe_dump_all(docs, sort_keys=False)


def make_certificates(hosts: Iterable[str], days: int = 825) -> dict[str, bytes]:
    """A self-signed CA and a server certificate for ``hosts`` (names or IP addresses) signed by it, as PEM:
    ``ca``, ``ca-key``, ``nats-server``, ``nats-server-key``.

    Raises:
        UsageError: the ``cryptography`` package is missing.
    """
    try:
        from cryptography import x509
        from cryptography.hazmat.primitives import hashes, serialization
        from cryptography.hazmat.primitives.asymmetric import ec
        from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID
    except ImportError as e:
        raise UsageError("--tls needs the cryptography package: pip install 'a2amesh[deploy]'") from e
    now = dt.datetime.now(dt.UTC)
    ca_key = ec.generate_private_key(ec.SECP256R1())
    server_key = ec.generate_private_key(ec.SECP256R1())
    ca_name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "a2amesh local CA")])
    ca = (
        x509.CertificateBuilder()
        .subject_name(ca_name)
        .issuer_name(ca_name)
        .public_key(ca_key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - dt.timedelta(minutes=5))
        .not_valid_after(now + dt.timedelta(days=days))
        .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
        .add_extension(
            x509.KeyUsage(
                digital_signature=False,
                content_commitment=False,
                key_encipherment=False,
                data_encipherment=False,
                key_agreement=False,
                key_cert_sign=True,
                crl_sign=True,
                encipher_only=False,
                decipher_only=False,
            ),
            critical=True,
        )
        .sign(ca_key, hashes.SHA256())
    )
    names: list[x509.GeneralName] = []
    for host in dict.fromkeys(hosts):
        try:
            names.append(x509.IPAddress(ipaddress.ip_address(host)))
        except ValueError:
            names.append(x509.DNSName(host))
    server = (
        x509.CertificateBuilder()
        .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "a2amesh nats")]))
        .issuer_name(ca_name)
        .public_key(server_key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - dt.timedelta(minutes=5))
        .not_valid_after(now + dt.timedelta(days=days))
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(x509.SubjectAlternativeName(names), critical=False)
        .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
        .sign(ca_key, hashes.SHA256())
    )

    def key_pem(key: ec.EllipticCurvePrivateKey) -> bytes:
        return key.private_bytes(
            serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
        )

    return {
        "ca": ca.public_bytes(serialization.Encoding.PEM),
        "ca-key": key_pem(ca_key),
        "nats-server": server.public_bytes(serialization.Encoding.PEM),
        "nats-server-key": key_pem(server_key),
    }
