"""Extended resources backed by DRA (KEP-5004, gate DRAExtendedResource): ``nvidia.com/gpu: 1`` → a claim.

A pod that asks for an extended resource in ``resources.requests`` / ``resources.limits`` of a container
or init container, with no ``resourceClaims``, gets its devices through one ResourceClaim the scheduler
writes for it. What kube-scheduler's DynamicResources plugin does (``extendeddynamicresources.go``,
``extended/cache.go``; extender-protocol.md §4.4), reproduced here:

* **Which names** (``DeviceClassResolver``): a DeviceClass is reachable under its
  ``spec.extendedResourceName`` and always under ``deviceclass.resource.kubernetes.io/<class>``. When two
  classes give the same ``extendedResourceName``, the newest (``creationTimestamp``) wins, ties go to the
  lexicographically first name (API doc of ``extendedResourceName``).
* **Which requests** (PreFilter): a pod uses the feature when some container or init container asks for a
  mapped name with a non-zero quantity. ``limits`` count where ``requests`` omits the name (API defaulting).
* **Per node** (Filter): a name the node offers itself (``status.allocatable`` > 0) goes through the
  device plugin; kube-scheduler's NodeResourcesFit checks it and no device is allocated for it there. The
  other names make the node's claim: one ``exactly`` request per (container, name) with the mapped class,
  ``allocationMode: ExactCount`` and ``count`` = the integer quantity, named ``container-<i>-request-<j>``
  (``i``: index in init containers followed by containers; ``j``: index of the name among that
  container's sorted request names, cpu and memory included). Requests are sorted by name. A non-sidecar
  init container first reuses the requests of the long-lived containers at or after its index (sidecars
  and regular containers) and only asks for what they do not cover; of the init containers' own requests
  for one name only the largest is kept and the others' mappings point to it. Names are taken in sorted
  order; for each, the long-lived containers' mappings come before the init containers'.
* **The claim**: annotation ``resource.kubernetes.io/extended-resource-claim: "true"``,
  ``generateName: <pod>-extended-resources-``, a controller ownerReference to the pod, allocated after the
  pod's own claims (it is the last claim of the pod). Its requests map to containers through
  ``pod.status.extendedResourceClaimStatus {resourceClaimName, requestMappings[{containerName,
  resourceName, requestName}]}``, written on bind.
* **A claim left from an earlier attempt** (annotated and controlled by the pod) makes every node fail;
  upstream's PostFilter deletes it and the pod is tried again (``PodExtendedResources.stale``).

Differences, on purpose: the claim gets its final name already when filtering (``generateName`` plus five
characters from a hash of namespace and pod, the next hash when that name is taken, like
``app.state.claimgen``), so reasons name the claim bind will create; upstream shows ``<extended-resources>``.
Quantities that are not integers do not make a request (upstream ``AsInt64``); malformed ones are an
input error for the pod.
"""

from __future__ import annotations

from collections.abc import Container, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from allocator.errors import InvalidInputError
from allocator.features import FeatureGates
from allocator.model import Claim, parse_claim
from allocator.quantity import QuantityError, parse_quantity
from app.state.claimgen import name_suffix
from app.state.podclaims import pod_key
from app.state.uids import stable_uid

__all__ = [
    "EXTENDED_RESOURCE_CLAIM_ANNOTATION",
    "IMPLICIT_EXTENDED_RESOURCE_PREFIX",
    "DeviceClassResolver",
    "ExtendedClaim",
    "PodExtendedResources",
    "RequestMapping",
    "extended_claim_name",
    "find_extended_claim",
    "is_dra_extended_resource_name",
    "missing_extended_resources",
    "pod_extended_resources",
    "requested_extended_resources",
]

Obj = Mapping[str, Any]

EXTENDED_RESOURCE_CLAIM_ANNOTATION = "resource.kubernetes.io/extended-resource-claim"
IMPLICIT_EXTENDED_RESOURCE_PREFIX = "deviceclass.resource.kubernetes.io/"
"""``resourceapi.ResourceDeviceClassPrefix``: every class is an extended resource under this prefix."""

_GENERATED_NAME_MAX_BASE = 58
"""apiserver ``SimpleNameGenerator``: ``generateName`` is cut to 63 - 5 characters before the suffix."""


def is_dra_extended_resource_name(name: str) -> bool:
    """``schedutil.IsDRAExtendedResourceName``: an extended resource name (``domain/name`` outside
    ``kubernetes.io``, not ``requests.*``) or the implicit ``deviceclass.resource.kubernetes.io/<class>``."""
    if name.startswith(IMPLICIT_EXTENDED_RESOURCE_PREFIX):
        return len(name) > len(IMPLICIT_EXTENDED_RESOURCE_PREFIX)
    return "/" in name and "kubernetes.io/" not in name and not name.startswith("requests.")


class DeviceClassResolver:
    """Extended resource name → DeviceClass name, from DeviceClass objects (API dicts)."""

    __slots__ = ("_classes", "_explicit")

    def __init__(self, device_classes: Iterable[Obj]) -> None:
        self._classes: set[str] = set()
        best: dict[str, tuple[str, str]] = {}  # name -> (creationTimestamp, class)
        for obj in device_classes:
            meta = obj.get("metadata") or {}
            class_name = str(meta.get("name") or "")
            if not class_name:
                continue
            self._classes.add(class_name)
            resource = (obj.get("spec") or {}).get("extendedResourceName")
            if not resource:
                continue
            created = str(meta.get("creationTimestamp") or "")
            current = best.get(resource)
            # Newest wins; on equal timestamps the lexicographically first class name.
            if current is None or created > current[0] or (created == current[0] and class_name < current[1]):
                best[resource] = (created, class_name)
        self._explicit = {resource: class_name for resource, (_, class_name) in best.items()}

    def class_for(self, resource: str) -> str | None:
        """The class backing ``resource``, or None. The implicit name always maps to its own class."""
        if resource.startswith(IMPLICIT_EXTENDED_RESOURCE_PREFIX):
            name = resource[len(IMPLICIT_EXTENDED_RESOURCE_PREFIX) :]
            return name if name in self._classes else None
        return self._explicit.get(resource)


@dataclass(frozen=True, slots=True)
class RequestMapping:
    """One ``pod.status.extendedResourceClaimStatus.requestMappings`` entry."""

    container_name: str
    resource_name: str
    request_name: str

    def to_api(self) -> dict[str, str]:
        return {
            "containerName": self.container_name,
            "resourceName": self.resource_name,
            "requestName": self.request_name,
        }


@dataclass(frozen=True, slots=True)
class ExtendedClaim:
    """The pod's extended-resource claim for one node: the API object to create (unallocated), its
    allocator view and the request mappings for the pod status."""

    obj: Obj
    claim: Claim
    mappings: tuple[RequestMapping, ...]

    @property
    def name(self) -> str:
        return self.claim.name

    @property
    def key(self) -> str:
        return self.claim.key

    def pod_status(self) -> dict[str, Any]:
        """``pod.status.extendedResourceClaimStatus`` once the claim exists under ``name``."""
        return {
            "requestMappings": [m.to_api() for m in self.mappings],
            "resourceClaimName": self.name,
        }


@dataclass(frozen=True, slots=True)
class _Container:
    index: int
    name: str
    requests: Mapping[str, Any]
    """Effective ``resources.requests`` (``limits`` fill in names ``requests`` omits), raw values."""
    long_lived: bool
    at: str


def _containers(pod: Obj) -> list[_Container]:
    spec = pod.get("spec") or {}
    init = [c for c in spec.get("initContainers") or () if isinstance(c, Mapping)]
    regular = [c for c in spec.get("containers") or () if isinstance(c, Mapping)]
    result = []
    for i, container in enumerate([*init, *regular]):
        is_init = i < len(init)
        resources = container.get("resources") or {}
        requests = dict(resources.get("limits") or {})
        requests.update(resources.get("requests") or {})
        kind, position = ("initContainers", i) if is_init else ("containers", i - len(init))
        result.append(
            _Container(
                index=i,
                name=str(container.get("name") or ""),
                requests=requests,
                long_lived=not is_init or container.get("restartPolicy") == "Always",
                at=f"spec.{kind}[{position}].resources",
            )
        )
    return result


def _count(container: _Container, resource: str, pod_ref: str) -> int:
    """The container's integer quantity of ``resource`` (0: none, zero or not an integer)."""
    raw = container.requests.get(resource)
    if raw is None:
        return 0
    try:
        value = parse_quantity(raw).value
    except QuantityError as e:
        raise InvalidInputError(f"pod {pod_ref}: {container.at}: {resource}: {e}") from e
    return int(value) if value.denominator == 1 and value > 0 else 0


@dataclass(frozen=True, slots=True)
class _Request:
    name: str
    count: int


def _container_request(
    container: _Container,
    resource: str,
    reusable: Iterable[_Request | None],
    pod_ref: str,
) -> tuple[_Request | None, list[RequestMapping]]:
    """The container's own request for ``resource`` (None when not needed) and its mappings: first the
    ``reusable`` requests it takes over until they cover its count, then its own for the rest."""
    wanted = _count(container, resource, pod_ref)
    if wanted == 0:
        return None, []
    mappings = []
    covered = 0
    for other in reusable:
        if other is None:
            continue
        covered += other.count
        mappings.append(RequestMapping(container.name, resource, other.name))
        if covered >= wanted:
            return None, mappings
    position = sorted(container.requests).index(resource)
    name = f"container-{container.index}-request-{position}"
    mappings.append(RequestMapping(container.name, resource, name))
    return _Request(name, wanted - covered), mappings


def _requests_and_mappings(
    containers: list[_Container], classes: Mapping[str, str], pod_ref: str
) -> tuple[list[tuple[_Request, str]], list[RequestMapping]]:
    """Requests (with their class) sorted by name, and mappings, for the names in ``classes``."""
    requests: list[tuple[_Request, str]] = []
    mappings: list[RequestMapping] = []
    for resource in sorted(classes):
        class_name = classes[resource]
        long_requests: list[_Request | None] = [None] * len(containers)
        long_mappings: list[RequestMapping] = []
        for c in containers:
            if c.long_lived:
                long_requests[c.index], found = _container_request(c, resource, (), pod_ref)
                long_mappings.extend(found)
        largest: _Request | None = None
        short_names: set[str] = set()
        short_mappings: list[RequestMapping] = []
        for c in containers:
            if c.long_lived:
                continue
            own, found = _container_request(c, resource, long_requests[c.index :], pod_ref)
            if own is not None:
                short_names.add(own.name)
                if largest is None or largest.count < own.count:
                    largest = own
            short_mappings.extend(found)
        if largest is not None and len(short_names) > 1:
            # Init containers run one after the other: the largest request serves all of them.
            short_mappings = [
                RequestMapping(m.container_name, m.resource_name, largest.name)
                if m.request_name in short_names
                else m
                for m in short_mappings
            ]
        if largest is not None:
            requests.append((largest, class_name))
        requests.extend((r, class_name) for r in long_requests if r is not None)
        mappings.extend(long_mappings)
        mappings.extend(short_mappings)
    requests.sort(key=lambda item: item[0].name)
    return requests, mappings


def extended_claim_name(namespace: str, pod_name: str, taken: Container[str] = ()) -> str:
    """``<pod>-extended-resources-`` (cut to 58 characters) plus 5 characters from a hash of the namespace
    and pod name; the next hash while the name is in ``taken``. Deterministic, like ``app.state.claimgen``."""
    base = f"{pod_name}-extended-resources-"[:_GENERATED_NAME_MAX_BASE]
    attempt = 0
    while True:
        name = base + name_suffix(f"{namespace}/{pod_name}/extended-resources#{attempt}")
        if name not in taken:
            return name
        attempt += 1


@dataclass(frozen=True, slots=True)
class _NamesIn:
    """The claim names taken in ``namespace``, looked up in ``claims`` (keyed ``namespace/name``)."""

    claims: Mapping[str, Obj]
    namespace: str

    def __contains__(self, name: object) -> bool:
        return f"{self.namespace}/{name}" in self.claims


def find_extended_claim(pod: Obj, claims: Iterable[Obj]) -> Obj | None:
    """Upstream ``findExtendedResourceClaim``: a claim annotated as the extended-resource claim whose
    controller ownerReference is this pod (name and UID)."""
    meta = pod.get("metadata") or {}
    namespace = meta.get("namespace") or "default"
    for claim in claims:
        claim_meta = claim.get("metadata") or {}
        if (claim_meta.get("namespace") or "default") != namespace:
            continue
        if (claim_meta.get("annotations") or {}).get(EXTENDED_RESOURCE_CLAIM_ANNOTATION) != "true":
            continue
        for owner in claim_meta.get("ownerReferences") or ():
            if (
                isinstance(owner, Mapping)
                and owner.get("controller") is True
                and owner.get("name") == meta.get("name")
                and owner.get("uid") == meta.get("uid")
            ):
                return claim
    return None


def _allocatable(node: Obj | None, resource: str) -> bool:
    """Whether the node offers ``resource`` itself (``status.allocatable`` > 0: the device plugin path)."""
    if not node:
        return False
    raw = ((node.get("status") or {}).get("allocatable") or {}).get(resource)
    if raw is None:
        return False
    try:
        return parse_quantity(raw).value > 0
    except QuantityError:
        return False


@dataclass(slots=True)
class PodExtendedResources:
    """A pod's DRA-backed extended resources (upstream PreFilter), turned into a claim per node (Filter).

    ``classes``: requested name → DeviceClass, for every mapped name with a non-zero request.
    ``stale``: an extended-resource claim of this pod left from an earlier attempt (upstream fails every
    node and deletes it in PostFilter), else None. ``name``: the name the new claim gets.
    """

    pod: Obj
    classes: Mapping[str, str]
    name: str
    stale: Obj | None = None
    _by_names: dict[frozenset[str], ExtendedClaim | None] = field(default_factory=dict)

    def dra_resources(self, node: Obj | None) -> frozenset[str]:
        """The names the node provides through DRA: mapped and not in its allocatable."""
        return frozenset(r for r in self.classes if not _allocatable(node, r))

    def claim_for_node(self, node: Obj | None) -> ExtendedClaim | None:
        """The claim to allocate on ``node`` (a core/v1 Node dict), or None when the device plugin covers
        everything there. Raises InvalidInputError for a malformed quantity in the pod."""
        names = self.dra_resources(node)
        if names not in self._by_names:
            self._by_names[names] = self._claim({r: self.classes[r] for r in names}) if names else None
        return self._by_names[names]

    def _claim(self, classes: Mapping[str, str]) -> ExtendedClaim | None:
        requests, mappings = _requests_and_mappings(_containers(self.pod), classes, pod_key(self.pod))
        if not requests:
            return None
        meta = self.pod.get("metadata") or {}
        namespace = meta.get("namespace") or "default"
        obj = {
            "apiVersion": "resource.k8s.io/v1",
            "kind": "ResourceClaim",
            "metadata": {
                "name": self.name,
                "generateName": f"{meta.get('name')}-extended-resources-",
                "namespace": namespace,
                "uid": stable_uid("ResourceClaim", namespace, self.name),
                "annotations": {EXTENDED_RESOURCE_CLAIM_ANNOTATION: "true"},
                "ownerReferences": [
                    {
                        "apiVersion": "v1",
                        "kind": "Pod",
                        "name": meta.get("name"),
                        "uid": meta.get("uid"),
                        "controller": True,
                    }
                ],
            },
            "spec": {
                "devices": {
                    "requests": [
                        {
                            "name": request.name,
                            "exactly": {
                                "deviceClassName": class_name,
                                "allocationMode": "ExactCount",
                                "count": request.count,
                            },
                        }
                        for request, class_name in requests
                    ]
                }
            },
        }
        return ExtendedClaim(obj, parse_claim(obj), tuple(mappings))


def missing_extended_resources(
    pod: Obj, node: Obj | None, device_classes: Iterable[Obj], gates: FeatureGates
) -> list[str]:
    """Requested extended resources (non-zero) that ``node`` offers neither itself (``status.allocatable``
    > 0) nor through DRA (a DeviceClass maps the name and DRAExtendedResource is on), sorted.

    kube-scheduler's NodeResourcesFit rejects such a node before any extender sees it ("Insufficient
    <name>"); ``simulate`` applies this check to stand in for it. Only presence is checked, not how much
    of a device-plugin resource other pods use. Raises InvalidInputError for a malformed quantity.
    """
    containers = _containers(pod)
    names = sorted({r for c in containers for r in c.requests if is_dra_extended_resource_name(r)})
    if not names:
        return []
    pod_ref = pod_key(pod)
    resolver = DeviceClassResolver(device_classes) if gates.DRAExtendedResource else None
    return [
        r
        for r in names
        if any(_count(c, r, pod_ref) for c in containers)
        and not _allocatable(node, r)
        and not (resolver is not None and resolver.class_for(r))
    ]


def requested_extended_resources(pod: Obj) -> list[str]:
    """Names some container or init container of ``pod`` requests (non-zero) that DRA could back
    (``is_dra_extended_resource_name``), sorted; whether a DeviceClass maps them is the caller's question.
    Raises InvalidInputError for a malformed quantity."""
    containers = _containers(pod)
    names = sorted({r for c in containers for r in c.requests if is_dra_extended_resource_name(r)})
    pod_ref = pod_key(pod)
    return [r for r in names if any(_count(c, r, pod_ref) for c in containers)]


def pod_extended_resources(
    pod: Obj,
    device_classes: Iterable[Obj],
    claims: Mapping[str, Obj],
    gates: FeatureGates,
) -> PodExtendedResources | None:
    """The pod's DRA-backed extended resources, or None when it has none (or DRAExtendedResource is off).

    ``device_classes``: DeviceClass dicts; ``claims``: ResourceClaim dicts keyed ``namespace/name``.
    Raises InvalidInputError when a requested quantity does not parse.
    """
    if not gates.DRAExtendedResource:
        return None
    containers = _containers(pod)
    candidates = {r for c in containers for r in c.requests if is_dra_extended_resource_name(r)}
    if not candidates:
        return None
    meta = pod.get("metadata") or {}
    namespace = meta.get("namespace") or "default"
    pod_ref = pod_key(pod)
    resolver = DeviceClassResolver(device_classes)
    classes = {}
    for resource in sorted(candidates):
        class_name = resolver.class_for(resource)
        if class_name and any(_count(c, resource, pod_ref) for c in containers):
            classes[resource] = class_name
    if not classes:
        return None
    stale = find_extended_claim(pod, claims.values())
    name = extended_claim_name(namespace, str(meta.get("name")), _NamesIn(claims, namespace))
    return PodExtendedResources(pod, classes, name, stale)
