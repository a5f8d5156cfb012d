"""A small synchronous Kubernetes REST client for the e2e tests: create, read, patch and delete objects
by kind, and poll with a deadline. Tests assert on what the API server returns, so this stays a thin
layer over HTTP (no caching, no conversion)."""

from __future__ import annotations

import ssl
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

import httpx

T = TypeVar("T")

# kind -> (API prefix, plural, namespaced)
KINDS: dict[str, tuple[str, str, bool]] = {
    "Namespace": ("api/v1", "namespaces", False),
    "Node": ("api/v1", "nodes", False),
    "Pod": ("api/v1", "pods", True),
    "Event": ("api/v1", "events", True),
    "ServiceAccount": ("api/v1", "serviceaccounts", True),
    "ConfigMap": ("api/v1", "configmaps", True),
    "Secret": ("api/v1", "secrets", True),
    "Deployment": ("apis/apps/v1", "deployments", True),
    "ClusterRole": ("apis/rbac.authorization.k8s.io/v1", "clusterroles", False),
    "ClusterRoleBinding": ("apis/rbac.authorization.k8s.io/v1", "clusterrolebindings", False),
    "Role": ("apis/rbac.authorization.k8s.io/v1", "roles", True),
    "RoleBinding": ("apis/rbac.authorization.k8s.io/v1", "rolebindings", True),
    "Lease": ("apis/coordination.k8s.io/v1", "leases", True),
    "PriorityClass": ("apis/scheduling.k8s.io/v1", "priorityclasses", False),
    "PodDisruptionBudget": ("apis/policy/v1", "poddisruptionbudgets", True),
    "PodGroup": ("apis/scheduling.k8s.io/v1beta1", "podgroups", True),
    "DeviceClass": ("apis/resource.k8s.io/v1", "deviceclasses", False),
    "ResourceSlice": ("apis/resource.k8s.io/v1", "resourceslices", False),
    "ResourceClaim": ("apis/resource.k8s.io/v1", "resourceclaims", True),
    "ResourceClaimTemplate": ("apis/resource.k8s.io/v1", "resourceclaimtemplates", True),
    "DeviceTaintRule": ("apis/resource.k8s.io/v1", "devicetaintrules", False),
    "MutatingWebhookConfiguration": (
        "apis/admissionregistration.k8s.io/v1",
        "mutatingwebhookconfigurations",
        False,
    ),
    "ValidatingWebhookConfiguration": (
        "apis/admissionregistration.k8s.io/v1",
        "validatingwebhookconfigurations",
        False,
    ),
}


def tls_context(ca: Path | None, cert: tuple[Path, Path] | None = None) -> ssl.SSLContext:
    """Verify the server against ``ca`` (None: a self-signed serving certificate, not verified) and
    present ``cert`` (certificate, key) as the client identity."""
    context = ssl.create_default_context(cafile=str(ca) if ca else None)
    if ca is None:
        context.check_hostname = False
        context.verify_mode = ssl.CERT_NONE
    if cert:
        context.load_cert_chain(str(cert[0]), str(cert[1]))
    return context


class ApiError(Exception):
    def __init__(self, response: httpx.Response) -> None:
        self.status = response.status_code
        try:
            self.body = response.json()
        except ValueError:
            self.body = {"message": response.text}
        super().__init__(
            f"{response.request.method} {response.request.url.path}: {self.status} {self.body.get('message')}"
        )


class Kube:
    def __init__(
        self, server: str, ca: Path, *, cert: tuple[Path, Path] | None = None, token: str | None = None
    ):
        headers = {"Authorization": f"Bearer {token}"} if token else {}
        self.http = httpx.Client(
            base_url=server,
            verify=tls_context(ca, cert),
            headers=headers,
            timeout=httpx.Timeout(30.0),
        )

    def close(self) -> None:
        self.http.close()

    @staticmethod
    def path(kind: str, namespace: str | None = None, name: str | None = None, sub: str | None = None) -> str:
        prefix, plural, namespaced = KINDS[kind]
        parts = [prefix]
        if namespaced and namespace:
            parts += ["namespaces", namespace]
        parts.append(plural)
        if name:
            parts.append(name)
        if sub:
            parts.append(sub)
        return "/" + "/".join(parts)

    def _call(self, method: str, path: str, **kwargs: Any) -> dict[str, Any]:
        response = self.http.request(method, path, **kwargs)
        if response.status_code >= 400:
            raise ApiError(response)
        return response.json()

    def create(self, obj: dict[str, Any], *, dry_run: bool = False) -> dict[str, Any]:
        """The object created (``dry_run``: as it would be, admission included, without storing it)."""
        ns = obj.get("metadata", {}).get("namespace") if KINDS[obj["kind"]][2] else None
        params = {"dryRun": "All"} if dry_run else None
        return self._call("POST", self.path(obj["kind"], ns), json=obj, params=params)

    def ensure(self, obj: dict[str, Any]) -> dict[str, Any]:
        """Create ``obj``, or leave the existing object of that name as it is (manifests applied twice)."""
        try:
            return self.create(obj)
        except ApiError as err:
            if err.status != 409:
                raise
            return self.get(obj["kind"], obj["metadata"]["name"], obj["metadata"].get("namespace"))

    def token(self, namespace: str, account: str, *, seconds: int) -> str:
        """A bound ServiceAccount token from the TokenRequest API."""
        request = {
            "apiVersion": "authentication.k8s.io/v1",
            "kind": "TokenRequest",
            "spec": {"expirationSeconds": seconds},
        }
        answer = self._call("POST", self.path("ServiceAccount", namespace, account, "token"), json=request)
        return answer["status"]["token"]

    def get(self, kind: str, name: str, namespace: str | None = None) -> dict[str, Any]:
        return self._call("GET", self.path(kind, namespace, name))

    def list(self, kind: str, namespace: str | None = None, **params: str) -> list[dict[str, Any]]:
        items: list[dict[str, Any]] = []
        query = dict(params, limit="500")
        while True:
            page = self._call("GET", self.path(kind, namespace), params=query)
            items += page["items"]
            token = page["metadata"].get("continue")
            if not token:
                return items
            query["continue"] = token

    def merge_patch(
        self,
        kind: str,
        name: str,
        patch: dict[str, Any],
        namespace: str | None = None,
        sub: str | None = None,
    ) -> dict[str, Any]:
        return self._call(
            "PATCH",
            self.path(kind, namespace, name, sub),
            json=patch,
            headers={"Content-Type": "application/merge-patch+json"},
        )

    def replace_status(self, obj: dict[str, Any]) -> dict[str, Any]:
        """PUT ``obj``'s status (its resourceVersion is the precondition), as a controller or driver does."""
        meta = obj["metadata"]
        ns = meta.get("namespace") if KINDS[obj["kind"]][2] else None
        return self._call("PUT", self.path(obj["kind"], ns, meta["name"], "status"), json=obj)

    def delete(self, kind: str, name: str, namespace: str | None = None, *, grace: int | None = 0) -> None:
        body = {"gracePeriodSeconds": grace} if grace is not None else None
        try:
            self._call("DELETE", self.path(kind, namespace, name), json=body)
        except ApiError as err:
            if err.status != 404:
                raise

    def delete_all(self, kind: str, namespace: str | None = None, *, attempts: int = 30) -> None:
        """Delete every object of ``kind`` (in ``namespace``), in as many collection deletes as it takes."""
        # kube-apiserver cuts a request at its --request-timeout (60 s) by closing the connection or with a
        # 504, having deleted what it got to: 10,000 pods take longer than that, so delete again until a
        # collection delete answers (it answers once every object it found is gone). Any other failure,
        # a refused connection included, is not a slow delete and is raised at once.
        path, params = self.path(kind, namespace), {"gracePeriodSeconds": "0"}
        cut: Exception | None = None
        for _ in range(attempts):
            try:
                self._call("DELETE", path, params=params, timeout=120.0)
                return
            except (httpx.RemoteProtocolError, httpx.ReadTimeout) as err:
                cut = err
            except ApiError as err:
                if err.status != 504:
                    raise
                cut = err
        where = namespace or "the cluster"
        raise TimeoutError(f"{kind} in {where}: not all deleted in {attempts} collection deletes") from cut


class ThreadClients:
    """One ``Kube`` client per thread that asks for one (``get``), all closed when the ``with`` block ends.

    Threads creating objects at once each use their own: one httpx client shared by 4 such threads
    ended a benchmark run with a TLS ``decode error`` alert from kube-apiserver, probably two requests'
    records interleaved on one connection."""

    def __init__(self, make: Callable[[], Kube]) -> None:
        self._make = make
        self._local = threading.local()
        self._made: list[Kube] = []

    def get(self) -> Kube:
        kube: Kube | None = getattr(self._local, "kube", None)
        if kube is None:
            kube = self._local.kube = self._make()
            self._made.append(kube)
        return kube

    def __enter__(self) -> ThreadClients:
        return self

    def __exit__(self, *_: object) -> None:
        for kube in self._made:
            kube.close()


def poll(
    check: Callable[[], T | None], *, timeout: float, interval: float = 0.2, what: str = "condition"
) -> T:
    """Call ``check`` until it returns something truthy, for at most ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while True:
        value = check()
        if value:
            return value
        if time.monotonic() > deadline:
            raise TimeoutError(f"{what} not reached within {timeout:.0f} s")
        time.sleep(interval)
