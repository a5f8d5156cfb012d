"""app.state.statedir: loading a directory of manifests into ClusterObjects."""

from __future__ import annotations

import json
import logging
import os
import socket
from pathlib import Path
from textwrap import dedent

import pytest

from app.state.statedir import ClusterObjects, StateLoadError, load_state
from app.state.uids import stable_uid

NODE = """
apiVersion: v1
kind: Node
metadata: {name: node-1, labels: {zone: a}}
"""
POD = """
apiVersion: v1
kind: Pod
metadata: {name: pod-1, namespace: team-a}
spec:
  containers: [{name: main, image: busybox, resources: {claims: [{name: gpu}]}}]
  resourceClaims: [{name: gpu, resourceClaimTemplateName: one-gpu}]
"""
SLICE_V1BETA1 = """
apiVersion: resource.k8s.io/v1beta1
kind: ResourceSlice
metadata: {name: node-1-gpus}
spec:
  driver: gpu.example.com
  nodeName: node-1
  pool: {name: node-1, generation: 0, resourceSliceCount: 1}
  devices:
  - name: gpu-0
    basic:
      attributes: {model: {string: A100}}
      capacity: {memory: {value: 40Gi}}
"""
TEMPLATE_V1BETA1 = """
apiVersion: resource.k8s.io/v1beta1
kind: ResourceClaimTemplate
metadata: {name: one-gpu, namespace: team-a}
spec:
  spec:
    devices:
      requests: [{name: gpu, deviceClassName: gpu.example.com}]
"""
CLASS = """
apiVersion: resource.k8s.io/v1
kind: DeviceClass
metadata: {name: gpu.example.com}
spec:
  selectors: [{cel: {expression: "device.driver == 'gpu.example.com'"}}]
"""
NAMESPACE = """
apiVersion: v1
kind: Namespace
metadata: {name: team-a}
"""


def write(root: Path, relative: str, *documents: str) -> Path:
    path = root / relative
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("---\n".join(dedent(document) for document in documents))
    return path


def load_error(path: Path) -> str:
    with pytest.raises(StateLoadError) as caught:
        load_state(path)
    return str(caught.value)


def names(objects: list[dict]) -> list[str]:
    return [obj["metadata"]["name"] for obj in objects]


# --- what gets loaded --------------------------------------------------------------------------------


def test_directory_is_read_recursively_with_multi_document_files(tmp_path: Path) -> None:
    write(tmp_path, "a/nodes.yaml", NODE, NAMESPACE)
    write(tmp_path, "a/b/dra.yml", SLICE_V1BETA1, CLASS, TEMPLATE_V1BETA1)
    write(tmp_path, "pods.yaml", POD)
    objects = load_state(tmp_path)
    assert names(objects.nodes) == ["node-1"]
    assert names(objects.pods) == ["pod-1"]
    assert names(objects.resource_slices) == ["node-1-gpus"]
    assert names(objects.device_classes) == ["gpu.example.com"]
    assert names(objects.resource_claim_templates) == ["one-gpu"]
    assert names(objects.namespaces) == ["team-a"]
    assert objects.count() == 6


def test_dra_objects_are_converted_to_v1(tmp_path: Path) -> None:
    write(tmp_path, "dra.yaml", SLICE_V1BETA1, TEMPLATE_V1BETA1)
    objects = load_state(tmp_path)
    (slice_,) = objects.resource_slices
    assert slice_["apiVersion"] == "resource.k8s.io/v1"
    assert slice_["spec"]["devices"] == [
        {
            "name": "gpu-0",
            "attributes": {"model": {"string": "A100"}},
            "capacity": {"memory": {"value": "40Gi"}},
        }
    ]
    (template,) = objects.resource_claim_templates
    assert template["spec"]["spec"]["devices"]["requests"] == [
        {"name": "gpu", "exactly": {"deviceClassName": "gpu.example.com"}}
    ]


def test_lists_are_flattened_and_typed_list_items_get_their_kind(tmp_path: Path) -> None:
    write(
        tmp_path,
        "list.yaml",
        """
        apiVersion: v1
        kind: List
        items:
        - {apiVersion: v1, kind: Node, metadata: {name: node-1}}
        - {apiVersion: v1, kind: Node, metadata: {name: node-2}}
        """,
        """
        apiVersion: resource.k8s.io/v1
        kind: DeviceClassList
        metadata: {resourceVersion: "7"}
        items:
        - metadata: {name: gpu.example.com}
          spec: {}
        """,
        "apiVersion: v1\nkind: List\nitems: []\n",
    )
    objects = load_state(tmp_path)
    assert names(objects.nodes) == ["node-1", "node-2"]
    assert objects.device_classes[0]["kind"] == "DeviceClass"


def test_json_files_and_single_file_paths(tmp_path: Path) -> None:
    path = tmp_path / "node.json"
    path.write_text(json.dumps({"apiVersion": "v1", "kind": "Node", "metadata": {"name": "node-9"}}))
    assert names(load_state(path).nodes) == ["node-9"]
    assert names(load_state(tmp_path).nodes) == ["node-9"]


def test_other_and_hidden_files_are_ignored(tmp_path: Path) -> None:
    write(tmp_path, "README.md", "not: [yaml")
    write(tmp_path, ".git/config.yaml", "{{ broken")
    write(tmp_path, ".hidden.yaml", "{{ broken")
    write(tmp_path, "empty.yaml", "# only a comment\n")
    write(tmp_path, "node.YAML", NODE)
    objects = load_state(tmp_path)
    assert names(objects.nodes) == ["node-1"]
    assert objects.warnings == []


def test_unknown_kinds_are_skipped_with_a_warning(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    path = write(
        tmp_path,
        "mixed.yaml",
        "apiVersion: apps/v1\nkind: Deployment\nmetadata: {name: web, namespace: team-a}\n",
        "apiVersion: resource.nvidia.com/v1beta1\nkind: ComputeDomain\nmetadata: {name: cd}\n",
        "apiVersion: kubescheduler.config.k8s.io/v1\nkind: KubeSchedulerConfiguration\n",
        "apiVersion: resource.k8s.io/v1alpha3\nkind: ResourcePoolStatusRequest\nmetadata: {name: r}\n",
    )
    with caplog.at_level(logging.WARNING, logger="app.state.statedir"):
        objects = load_state(tmp_path)
    assert objects.count() == 0
    assert objects.warnings == [
        f"{path}: Deployment team-a/web: skipped (apps/v1 Deployment is not used by the extender)",
        f"{path}: ComputeDomain cd: skipped "
        "(resource.nvidia.com/v1beta1 ComputeDomain is not used by the extender)",
        f"{path}: KubeSchedulerConfiguration ?: skipped "
        "(kubescheduler.config.k8s.io/v1 KubeSchedulerConfiguration is not used by the extender)",
        f"{path}: ResourcePoolStatusRequest r: skipped "
        "(resource.k8s.io/v1alpha3 ResourcePoolStatusRequest is not used by the extender)",
    ]
    assert [record.getMessage() for record in caplog.records] == objects.warnings
    assert objects.unknown_kinds == []


def test_a_kind_its_api_group_does_not_have_is_an_unknown_kind(tmp_path: Path) -> None:
    path = write(
        tmp_path,
        "typo.yaml",
        "apiVersion: resource.k8s.io/v1\nkind: ResourceClame\nmetadata: {name: c, namespace: ml}\n",
        "apiVersion: v1\nkind: Nodee\nmetadata: {name: n}\n",
        "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: m}\n",  # core, merely not used
    )
    objects = load_state(tmp_path)
    # As kubectl says (the API server refuses them), with the kept kind it looks like.
    assert objects.unknown_kinds == [
        f'{path}: ResourceClame ml/c: no matches for kind "ResourceClame" in version "resource.k8s.io/v1" '
        "(did you mean ResourceClaim?)",
        f'{path}: Nodee n: no matches for kind "Nodee" in version "v1" (did you mean Node?)',
    ]
    assert objects.warnings == [f"{path}: ConfigMap m: skipped (v1 ConfigMap is not used by the extender)"]
    with pytest.raises(StateLoadError, match='ResourceClame ml/c: no matches for kind "ResourceClame"'):
        load_state(tmp_path, strict_fields=True)


def test_namespaced_kinds_default_to_the_default_namespace(tmp_path: Path) -> None:
    write(tmp_path, "pod.yaml", POD.replace("namespace: team-a", "labels: {}"), CLASS)
    objects = load_state(tmp_path)
    assert objects.pods[0]["metadata"]["namespace"] == "default"
    assert "namespace" not in objects.device_classes[0]["metadata"]


def test_pods_without_uid_get_a_stable_uid(tmp_path: Path) -> None:
    write(tmp_path, "pods.yaml", POD, POD.replace("pod-1", "pod-2").replace("team-a}", "team-a, uid: given}"))
    first, second = load_state(tmp_path), load_state(tmp_path)
    uid = first.pods[0]["metadata"]["uid"]
    assert uid == stable_uid("Pod", "team-a", "pod-1") == second.pods[0]["metadata"]["uid"]
    assert first.pods[1]["metadata"]["uid"] == "given"


def test_timestamps_stay_strings(tmp_path: Path) -> None:
    write(
        tmp_path,
        "node.yaml",
        NODE.replace("{name: node-1,", "{creationTimestamp: 2026-01-02T03:04:05Z, name: node-1,"),
    )
    assert load_state(tmp_path).nodes[0]["metadata"]["creationTimestamp"] == "2026-01-02T03:04:05Z"


def test_cluster_objects_lists_by_kind() -> None:
    objects = ClusterObjects(nodes=[{"metadata": {"name": "n"}}])
    assert objects.of_kind("Node") is objects.nodes
    with pytest.raises(KeyError):
        objects.of_kind("Deployment")


# --- errors ------------------------------------------------------------------------------------------


def test_error_message_names_file_kind_object_field_and_problem(tmp_path: Path) -> None:
    path = write(
        tmp_path,
        "t.yaml",
        TEMPLATE_V1BETA1.replace(
            "deviceClassName: gpu.example.com", "deviceClassName: gpu.example.com, count: two"
        ),
    )
    assert load_error(tmp_path) == (
        f"{path}: ResourceClaimTemplate team-a/one-gpu: spec.spec.devices.requests[0].exactly.count: "
        "must be an integer"
    )


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        pytest.param(
            "apiVersion: resource.k8s.io/v1\nkind: DeviceClass\nmetadata:\n  name: {{ .Values.name }}\n",
            "line 4: Helm/Go template directive `{{ ... }}`: not plain YAML",
            id="helm-template",
        ),
        pytest.param(
            "kind: ResourceSlice\napiVersion: resource.k8s.io/v1\nspec:\n  {{- if .Values.x }}\n  a: b\n",
            "line 4: Helm/Go template directive",
            id="template-that-would-not-parse",
        ),
        pytest.param(
            "kind: ResourceSlice\napiVersion: resource.k8s.io/v1beta1\n...\nspec:\n  pool:\n    ...\n",
            "line 4: not valid YAML: did not find expected <document start> (the file contains `...`",
            id="kep-elision",
        ),
        pytest.param("a: [1, 2\n", "line 2: not valid YAML", id="broken-yaml"),
        pytest.param("a: 1\na: 2\n", "line 2: not valid YAML: found duplicate key 'a'", id="duplicate-key"),
        pytest.param(
            "requests: [gpu]\nmatchAttribute: resource.kubernetes.io/numaNode\n",
            "document 0: kind: Required value (not a Kubernetes object",
            id="fragment",
        ),
        pytest.param("- a\n- b\n", "document 0: must be a mapping, got list", id="list-document"),
        pytest.param(
            "kind: Pod\nmetadata: {name: p}\nspec: {containers: []}\n",
            "Pod default/p: apiVersion: Required value",
            id="no-api-version",
        ),
        pytest.param(
            "apiVersion: resource.k8s.io/v1\nkind: ResourceClaim\nspec: {devices: {requests: []}}\n",
            "ResourceClaim default/?: metadata.name: Required value",
            id="no-name",
        ),
        pytest.param(
            "apiVersion: resource.k8s.io/v1alpha2\nkind: ResourceClaim\nmetadata: {name: c}\n"
            "spec: {resourceClassName: gpu.example.com}\n",
            "ResourceClaim default/c: apiVersion: resource.k8s.io/v1alpha2 is classic DRA",
            id="classic-dra-claim",
        ),
        pytest.param(
            "apiVersion: resource.k8s.io/v1alpha2\nkind: ResourceClass\nmetadata: {name: gpu}\n",
            "ResourceClass gpu: apiVersion: resource.k8s.io/v1alpha2 is classic DRA",
            id="classic-dra-class",
        ),
        pytest.param(
            "apiVersion: v1\nkind: Pod\nmetadata: {name: p}\n"
            "spec: {resourceClaims: [{name: gpu, source: {resourceClaimTemplateName: t}}]}\n",
            "Pod default/p: spec.resourceClaims[0].source: the pre-1.31 (classic DRA) `source:` wrapper",
            id="pod-claim-source",
        ),
        pytest.param(
            "apiVersion: v1\nkind: Pod\nmetadata: {name: p}\n"
            "spec: {resourceClaims: [{name: gpu, resourceClaimName: a, resourceClaimTemplateName: t}]}\n",
            "Pod default/p: spec.resourceClaims[0]: exactly one of `resourceClaimName`, ",
            id="pod-claim-both",
        ),
        pytest.param(
            # Was a traceback (unhashable dict) in template claim generation.
            "apiVersion: v1\nkind: Pod\nmetadata: {name: p}\n"
            "spec: {resourceClaims: [{name: gpu, resourceClaimTemplateName: {a: 1}}]}\n",
            "Pod default/p: spec.resourceClaims[0].resourceClaimTemplateName: must be a string, got {'a': 1}",
            id="pod-claim-template-not-a-string",
        ),
        pytest.param(
            "apiVersion: v1\nkind: Pod\nmetadata: {name: p}\n"
            "spec: {resourceClaims: [{name: gpu, resourceClaimName: 7}]}\n",
            "Pod default/p: spec.resourceClaims[0].resourceClaimName: must be a string, got 7",
            id="pod-claim-name-not-a-string",
        ),
        pytest.param(
            "apiVersion: v2\nkind: Node\nmetadata: {name: n}\n",
            "Node n: apiVersion: Node must be apiVersion v1, got 'v2'",
            id="node-api-version",
        ),
        pytest.param(
            "apiVersion: v1\nkind: Pod\nmetadata: {name: p, namespace: 5}\nspec: {containers: []}\n",
            "Pod 5/p: metadata.namespace: must be a string, got 5",
            id="numeric-namespace",
        ),
        pytest.param(
            "apiVersion: resource.k8s.io/v1\nkind: ResourceClaim\nmetadata: {name: c, namespace: [ml]}\n"
            "spec: {devices: {requests: []}}\n",
            "ResourceClaim ['ml']/c: metadata.namespace: must be a string, got ['ml']",
            id="list-namespace",
        ),
        pytest.param(
            "apiVersion: v1\nkind: Pod\nmetadata: {name: p}\n"
            "spec: {schedulingGroup: train, containers: []}\n",
            "Pod default/p: spec.schedulingGroup: must be an object, got 'train'",
            id="scheduling-group-no-object",
        ),
        pytest.param(
            "apiVersion: v1\nkind: Pod\nmetadata: {name: p}\n"
            "spec: {schedulingGroup: {podGroupName: 7}, containers: []}\n",
            "Pod default/p: spec.schedulingGroup.podGroupName: must be a string, got 7",
            id="pod-group-name-no-string",
        ),
    ],
)
def test_invalid_input_raises_with_the_reason(tmp_path: Path, text: str, expected: str) -> None:
    path = write(tmp_path, "bad.yaml", text)
    assert load_error(tmp_path).startswith(f"{path}: {expected}")


def test_template_directive_in_a_kept_object_names_the_field(tmp_path: Path) -> None:
    path = write(
        tmp_path, "class.yaml", CLASS.replace("{name: gpu.example.com}", "{name: 'class-{{.Index}}'}")
    )
    assert load_error(tmp_path) == (
        f"{path}: DeviceClass class-{{{{.Index}}}}: metadata.name: "
        "Helm/Go template directive `{{ ... }}`: not plain YAML; render the template first "
        "(helm template, or the tool that fills it in)"
    )


def test_template_text_in_free_text_fields_and_skipped_kinds_is_data(tmp_path: Path) -> None:
    write(
        tmp_path,
        "dump.yaml",
        """
        apiVersion: v1
        kind: ConfigMap
        metadata: {name: alerts, namespace: monitoring}
        data: {rules.yaml: 'summary: "{{ $labels.instance }} down"'}
        """,
        """
        apiVersion: v1
        kind: Pod
        metadata: {name: debug, annotations: {note: "{{ not a template }}"}}
        spec:
          containers: [{name: c, image: x, args: ["--format={{.Name}}"], env: [{name: F, value: "{{x}}"}]}]
        """,
        """
        apiVersion: resource.k8s.io/v1
        kind: ResourceClaim
        metadata: {name: c}
        spec:
          devices:
            requests: [{name: gpu, exactly: {deviceClassName: gpu.example.com}}]
            config: [{opaque: {driver: gpu.example.com, parameters: {banner: "{{ hello }}"}}}]
        """,
    )
    objects = load_state(tmp_path)
    assert names(objects.pods) == ["debug"] and names(objects.resource_claims) == ["c"]


def test_duplicates_across_files_name_both_files(tmp_path: Path) -> None:
    first = write(tmp_path, "a.yaml", CLASS)
    second = write(tmp_path, "b.yaml", CLASS)
    assert load_error(tmp_path) == (
        f"{second}: DeviceClass gpu.example.com: duplicate object (first defined in {first})"
    )


def test_same_name_in_other_namespace_or_kind_is_not_a_duplicate(tmp_path: Path) -> None:
    write(tmp_path, "a.yaml", POD, POD.replace("team-a", "team-b"), NODE.replace("node-1", "pod-1"))
    objects = load_state(tmp_path)
    assert len(objects.pods) == 2 and len(objects.nodes) == 1


def test_duplicate_in_the_same_file(tmp_path: Path) -> None:
    path = write(tmp_path, "a.yaml", NODE, NODE)
    assert load_error(tmp_path) == f"{path}: Node node-1: duplicate object (earlier in the same file)"


def test_missing_path(tmp_path: Path) -> None:
    assert load_error(tmp_path / "nope") == f"{tmp_path / 'nope'}: no such file or directory"


@pytest.mark.parametrize("kind", ["fifo", "device"])
def test_a_state_path_that_is_neither_a_file_nor_a_directory_says_so(tmp_path: Path, kind: str) -> None:
    # It exists: "no such file or directory" sent the user looking for a typo.
    path = tmp_path / "state.yaml"
    if kind == "fifo":
        os.mkfifo(path)
    else:
        path.symlink_to("/dev/null")
    assert load_error(path) == f"{path}: not a regular file or directory"


def test_special_files_named_like_manifests_are_skipped_with_a_warning_unopened(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    # They were skipped without a word; opening the FIFO (nobody writes to it) would block forever.
    write(tmp_path, "a-node.yaml", NODE)
    fifo = tmp_path / "b-fifo.yaml"
    os.mkfifo(fifo)
    device = tmp_path / "c-device.yaml"
    device.symlink_to("/dev/null")
    dangling = tmp_path / "d-dangling.yml"
    dangling.symlink_to(tmp_path / "nowhere.yaml")
    socket_path = tmp_path / "sub" / "e-socket.json"
    socket_path.parent.mkdir()
    server = socket.socket(socket.AF_UNIX)
    server.bind(str(socket_path))
    linked_dir = tmp_path / "f-dir.yaml"
    linked_dir.symlink_to(socket_path.parent)
    os.mkfifo(tmp_path / "g-fifo.txt")  # not named like a manifest: not ours to mention
    try:
        with caplog.at_level(logging.WARNING, logger="app.state.statedir"):
            objects = load_state(tmp_path)
    finally:
        server.close()
    assert names(objects.nodes) == ["node-1"]
    # Listed for the command to report (validate: as problems), not logged by the loader.
    assert objects.skipped_files == [
        f"{fifo}: skipped (a FIFO, not a regular file)",
        f"{device}: skipped (a symbolic link to a character device, not a regular file)",
        f"{dangling}: skipped (a symbolic link to {tmp_path / 'nowhere.yaml'}: No such file or directory)",
        f"{linked_dir}: skipped (a symbolic link to a directory, not followed)",
        f"{socket_path}: skipped (a socket, not a regular file)",
    ]
    assert objects.warnings == [] and caplog.records == []


def test_non_strict_turns_errors_into_warnings_and_keeps_the_rest(tmp_path: Path) -> None:
    bad_file = write(tmp_path, "a-template.yaml", "name: {{ .Values.name }}\n")
    mixed = write(tmp_path, "b.yaml", NODE, "apiVersion: v1\nkind: Node\nmetadata: {}\n", CLASS, CLASS)
    objects = load_state(tmp_path, strict=False)
    assert names(objects.nodes) == ["node-1"]
    assert names(objects.device_classes) == ["gpu.example.com"]
    assert len(objects.warnings) == 3
    assert objects.warnings[0].startswith(f"{bad_file}: line 1: Helm/Go template directive")
    assert objects.warnings[1] == f"{mixed}: Node ?: metadata.name: Required value (skipped)"
    assert objects.warnings[2].startswith(f"{mixed}: DeviceClass gpu.example.com: duplicate object")
    with pytest.raises(StateLoadError):
        load_state(tmp_path)


def test_loaded_objects_are_private_copies(tmp_path: Path) -> None:
    write(tmp_path, "pod.yaml", POD)
    first = load_state(tmp_path)
    first.pods[0]["spec"]["resourceClaims"].clear()
    assert load_state(tmp_path).pods[0]["spec"]["resourceClaims"]


def test_identical_repeats_are_loaded_once_and_differing_duplicates_fail(tmp_path: Path) -> None:
    # Demo sets repeat their Namespace in every file; kubectl apply accepts identical repeats.
    write(tmp_path, "a.yaml", NAMESPACE, NODE)
    write(tmp_path, "b.yaml", NAMESPACE)
    assert names(load_state(tmp_path).namespaces) == ["team-a"]
    write(tmp_path, "c.yaml", NAMESPACE.replace("name: team-a", "name: team-a, labels: {x: y}"))
    with pytest.raises(StateLoadError, match="duplicate object"):
        load_state(tmp_path)


@pytest.mark.parametrize(
    ("document", "problem"),
    [
        ("apiVersion: v1\nkind: Node\nmetadata: {name: n, labels: {1: a}}\n", "non-string key 1"),
        ("apiVersion: v1\nkind: Node\nmetadata: {name: n, labels: {on: a}}\n", "non-string key True"),
        ("apiVersion: v1\nkind: Node\nmetadata: {name: n, labels: {a: !!binary aGk=}}\n", "type bytes"),
        ("apiVersion: v1\nkind: Node\nmetadata: {name: n}\nspec: &a {x: [*a]}\n", "refers to itself"),
        (
            "apiVersion: v1\nkind: Node\nmetadata: {name: n, labels: {a: 1}}\n",
            "metadata.labels: must be a map",
        ),
    ],
)
def test_yaml_that_is_not_plain_json_data_is_rejected_clearly(
    tmp_path: Path, document: str, problem: str
) -> None:
    write(tmp_path, "bad.yaml", document)
    assert problem in load_error(tmp_path)


def test_alias_bomb_is_rejected_quickly(tmp_path: Path) -> None:
    lines = ["a0: &a0 [x, x, x, x, x, x, x, x, x, x]"]
    lines += [f"a{i}: &a{i} [{', '.join([f'*a{i - 1}'] * 10)}]" for i in range(1, 10)]
    write(
        tmp_path,
        "bomb.yaml",
        "apiVersion: v1\nkind: Node\nmetadata: {name: n}\nspec:\n  " + "\n  ".join(lines),
    )
    assert "values once aliases are expanded" in load_error(tmp_path)


def test_a_large_cluster_dump_without_aliases_loads(tmp_path: Path) -> None:
    # `kubectl get nodes -o json` of a large cluster is one List document: 2,000 Nodes of 600 labels hold
    # 1.2 million values, over the alias bound. Without aliases every value is written out in the text,
    # so it loads (`make bench-cli`'s 5000-node state was refused).
    labels = {f"example.com/label-{i}": "x" for i in range(600)}
    items = [
        {"apiVersion": "v1", "kind": "Node", "metadata": {"name": f"n{i}", "labels": labels}}
        for i in range(2000)
    ]
    (tmp_path / "nodes.json").write_text(json.dumps({"apiVersion": "v1", "kind": "List", "items": items}))
    assert len(load_state(tmp_path).nodes) == 2000


def _nested(depth: int) -> dict:
    """A mapping ``depth`` levels deep (the outermost one counts as 1)."""
    value: dict = {}
    for _ in range(depth - 1):
        value = {"k": value}
    return value


@pytest.mark.parametrize("depth", [300, 900])
@pytest.mark.parametrize("suffix", [".yaml", ".json"])
def test_deeply_nested_documents_are_refused_naming_the_limit(
    tmp_path: Path, depth: int, suffix: str
) -> None:
    # 300 levels passed the parser and then broke the copy (orjson stops at 255 levels); 900 levels of YAML
    # overflowed the Python stack while the document was constructed. Both were tracebacks.
    node = {"apiVersion": "v1", "kind": "Node", "metadata": {"name": "n"}, "spec": _nested(depth)}
    (tmp_path / f"deep{suffix}").write_text(json.dumps(node))
    message = load_error(tmp_path)
    assert f"deep{suffix}" in message
    assert "nested more than 200 levels deep" in message


def test_aliases_cannot_build_a_deep_document(tmp_path: Path) -> None:
    # Each anchor wraps the previous one: flat text, a document 250 levels deep once the aliases resolve.
    lines = ["a0: &a0 {x: 1}"] + [f"a{i}: &a{i} {{x: *a{i - 1}}}" for i in range(1, 250)]
    write(
        tmp_path,
        "chain.yaml",
        "apiVersion: v1\nkind: Node\nmetadata: {name: n}\nspec:\n  " + "\n  ".join(lines),
    )
    assert "nested more than 200 levels deep" in load_error(tmp_path)


def test_a_document_of_200_levels_loads(tmp_path: Path) -> None:
    # The document itself is level 1, spec level 2: 198 more levels below spec make 200.
    node = {"apiVersion": "v1", "kind": "Node", "metadata": {"name": "n"}, "spec": _nested(199)}
    (tmp_path / "deep.json").write_text(json.dumps(node))
    assert names(load_state(tmp_path).nodes) == ["n"]


@pytest.mark.parametrize(
    ("value", "problem"),
    [
        ("1180591620717411303424", "integer out of range"),  # 2**70
        ("-9223372036854775809", "integer out of range"),  # -2**63 - 1
        # More digits than Python converts (4300): a ValueError traceback from the YAML constructor.
        ("1" + "0" * 5000, "line 4: not valid YAML: integer out of range (64-bit): 5001 digits"),
        (".inf", "not a JSON number"),
        (".nan", "not a JSON number"),
    ],
)
def test_numbers_json_cannot_hold_are_refused(tmp_path: Path, value: str, problem: str) -> None:
    # orjson refused 2**70 with a traceback and wrote inf / nan as null, silently changing the value.
    write(tmp_path, "n.yaml", f"apiVersion: v1\nkind: Node\nmetadata: {{name: n}}\nspec: {{x: {value}}}\n")
    message = load_error(tmp_path)
    assert "n.yaml" in message and problem in message


def test_the_largest_int64_loads(tmp_path: Path) -> None:
    write(
        tmp_path,
        "n.yaml",
        "apiVersion: v1\nkind: Node\nmetadata: {name: n}\nspec: {x: 9223372036854775807}\n",
    )
    assert load_state(tmp_path).nodes[0]["spec"]["x"] == 2**63 - 1


def test_a_file_over_the_size_cap_is_refused_before_it_is_read(tmp_path: Path) -> None:
    # A 5 GiB sparse file: reading it whole would take 5 GiB of memory (and minutes for YAML).
    big = tmp_path / "huge.yaml"
    with big.open("wb") as handle:
        handle.truncate(5 << 30)
    message = load_error(tmp_path)
    assert str(big) in message
    assert "larger than 64 MiB" in message and "5368709120 bytes" in message


def test_the_cap_holds_when_the_size_on_disk_says_less(monkeypatch) -> None:
    # /proc files report size 0 and have content: what is read counts, not what stat says.
    from app.state import statedir

    maps = Path("/proc/self/maps")
    if not maps.is_file() or maps.stat().st_size != 0:
        pytest.skip("needs Linux /proc")
    monkeypatch.setattr(statedir, "MAX_FILE_BYTES", 100)
    assert "larger than" in load_error(maps)


@pytest.mark.parametrize("depth", [300, 900])
def test_deep_yaml_bodies_are_a_value_error_naming_the_source(depth: int) -> None:
    from app.state.documents import load_yaml_document

    with pytest.raises(ValueError, match=r"^body: nested more than 200 levels deep$"):
        load_yaml_document(json.dumps(_nested(depth)), "body")


_POD_WITH = (
    "apiVersion: v1\nkind: Pod\nmetadata: {{name: p, namespace: ns}}\nspec: {{{spec}}}\nstatus: {status}\n"
)
_CONTAINER = "containers: [{{name: c, image: i, resources: {resources}}}]"


@pytest.mark.parametrize(
    ("document", "expected"),
    [
        # Each was a traceback further on (simulate, serve): the readers trust the API's shapes.
        (
            "apiVersion: v1\nkind: Node\nmetadata: {name: n}\nstatus: true\n",
            "Node n: status: must be an object, got boolean",
        ),
        (
            "apiVersion: v1\nkind: Node\nmetadata: {name: n}\nstatus: {declaredFeatures: 5}\n",
            "Node n: status.declaredFeatures: must be a list, got number",
        ),
        (
            "apiVersion: v1\nkind: Node\nmetadata: {name: n}\nstatus: {allocatable: [cpu]}\n",
            "Node n: status.allocatable: must be a map, got list",
        ),
        (
            _POD_WITH.format(spec="containers: 1.5", status="{}"),
            "Pod ns/p: spec.containers: must be a list, got number",
        ),
        (
            _POD_WITH.format(spec=_CONTAINER.format(resources="str"), status="{}"),
            "Pod ns/p: spec.containers[0].resources: must be an object, got string",
        ),
        (
            _POD_WITH.format(spec=_CONTAINER.format(resources="{limits: -1}"), status="{}"),
            "Pod ns/p: spec.containers[0].resources.limits: must be a map, got number",
        ),
        (
            _POD_WITH.format(spec="containers: []", status="1000000000000"),
            "Pod ns/p: status: must be an object, got number",
        ),
        (
            _POD_WITH.format(spec="containers: [], tolerations: [5]", status="{}"),
            "Pod ns/p: spec.tolerations[0]: must be an object, got number",
        ),
    ],
)
def test_core_objects_with_fields_of_the_wrong_shape_name_the_field(
    tmp_path: Path, document: str, expected: str
) -> None:
    write(tmp_path, "bad.yaml", document)
    assert load_error(tmp_path) == f"{tmp_path / 'bad.yaml'}: {expected}"


def test_null_fields_of_core_objects_are_the_zero_value(tmp_path: Path) -> None:
    write(tmp_path, "ok.yaml", _POD_WITH.format(spec="containers: null, tolerations: null", status="null"))
    assert names(load_state(tmp_path).pods) == ["p"]
