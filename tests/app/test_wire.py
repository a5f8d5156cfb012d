"""Golden tests of the extender wire format, both directions (extender-protocol.md §1.1-1.5)."""

from __future__ import annotations

import inspect
import json
import re
import sys
import threading
import tracemalloc
from collections.abc import Callable

import orjson
import pytest
from hypothesis import given
from hypothesis import strategies as st

from app.http.wire import (
    WireError,
    decode_binding_args,
    decode_extender_args,
    decode_preemption_args,
    encode_binding_result,
    encode_error,
    encode_filter_result,
    encode_host_priorities,
)
from app.scheduling.decisions import list_key
from app.scheduling.service import FilterOutcome

# §1.1: the Pod kube-scheduler sends (informer copy: no kind/apiVersion).
POD = b"""{
  "metadata": {
    "name": "trainer-0", "namespace": "ml", "uid": "6a1f9f4e-6c1e-4b7a-9a43-0d1f3c0b8e11",
    "resourceVersion": "884213", "creationTimestamp": "2025-06-01T10:00:00Z", "labels": {"app": "trainer"}
  },
  "spec": {
    "resourceClaims": [{"name": "gpu", "resourceClaimTemplateName": "one-gpu"}],
    "containers": [{"name": "main", "image": "registry.example/trainer:1.0",
                    "resources": {"claims": [{"name": "gpu"}]},
                    "terminationMessagePath": "/dev/termination-log", "terminationMessagePolicy": "File",
                    "imagePullPolicy": "IfNotPresent"}],
    "restartPolicy": "Always", "terminationGracePeriodSeconds": 30, "dnsPolicy": "ClusterFirst",
    "serviceAccountName": "default", "securityContext": {}, "schedulerName": "default-scheduler",
    "tolerations": [
      {"key": "node.kubernetes.io/not-ready", "operator": "Exists", "effect": "NoExecute",
       "tolerationSeconds": 300},
      {"key": "node.kubernetes.io/unreachable", "operator": "Exists", "effect": "NoExecute",
       "tolerationSeconds": 300}
    ],
    "priority": 0, "enableServiceLinks": true, "preemptionPolicy": "PreemptLowerPriority"
  },
  "status": {"phase": "Pending", "qosClass": "BestEffort",
             "resourceClaimStatuses": [{"name": "gpu", "resourceClaimName": "trainer-0-gpu-7xk2p"}]}
}"""

FILTER_NODE_NAMES = b'{"Pod": ' + POD + b', "Nodes": null, "NodeNames": ["node-a", "node-b", "node-c"]}'

# §1.2
NODE_A = b"""{
  "metadata": {"name": "node-a", "uid": "0b6e", "resourceVersion": "88100",
               "labels": {"kubernetes.io/hostname": "node-a", "kubernetes.io/os": "linux"}},
  "spec": {"podCIDR": "10.244.1.0/24"},
  "status": {
    "capacity": {"cpu": "32", "memory": "263921848Ki", "pods": "110"},
    "allocatable": {"cpu": "31500m", "memory": "261722296Ki", "pods": "110"},
    "conditions": [{"type": "Ready", "status": "True", "lastHeartbeatTime": "2025-06-01T10:00:00Z",
                    "lastTransitionTime": "2025-05-01T00:00:00Z", "reason": "KubeletReady",
                    "message": "kubelet is posting ready status"}],
    "nodeInfo": {"kubeletVersion": "v1.34.1", "operatingSystem": "linux", "architecture": "amd64",
                 "machineID": "", "systemUUID": "", "bootID": "", "kernelVersion": "", "osImage": "",
                 "containerRuntimeVersion": "containerd://2.0.0", "kubeProxyVersion": ""}
  }
}"""
NODE_B = b'{"metadata": {"name": "node-b"}, "spec": {}, "status": {"allocatable": {"cpu": "4"}}}'
NODE_C = b'{"metadata": {"name": "node-c", "labels": {"zone": "z3"}}}'

FILTER_NODES = (
    b'{"Pod": '
    + POD
    + b', "Nodes": {"metadata": {}, "items": ['
    + NODE_A
    + b", "
    + NODE_B
    + b", "
    + NODE_C
    + b']}, "NodeNames": null}'
)

# §1.4, §1.5
PRIORITIZE = b'{"Pod": ' + POD + b', "Nodes": null, "NodeNames": ["node-a", "node-d"]}'
BIND = (
    b'{"PodName": "trainer-0", "PodNamespace": "ml", "PodUID": "6a1f9f4e-6c1e-4b7a-9a43-0d1f3c0b8e11", '
    b'"Node": "node-a"}'
)


# --- decoding ------------------------------------------------------------------------------------------


def test_decode_filter_node_cache_capable():
    args = decode_extender_args(FILTER_NODE_NAMES)
    assert args.pod == orjson.loads(POD)
    assert args.nodes is None
    assert args.node_names == ["node-a", "node-b", "node-c"]
    assert args.node_cache_capable
    assert args.candidate_names == ["node-a", "node-b", "node-c"]
    assert args.nodes_by_name is None


def test_node_lists_whose_names_join_alike_get_different_keys():
    def key(names: list[str]) -> int | None:
        body = orjson.dumps({"Pod": {"metadata": {"name": "p"}}, "NodeNames": names})
        args = decode_extender_args(body)
        return list_key(args.candidate_names, args.node_names_text)

    # Names joined by newlines read "a\nb\nc" for the first three lists, and "" for the last two.
    lists = [["a", "b", "c"], ["a", "b\nc"], ["a\nb", "c"], ["a", "b", "c "], [], [""]]
    keys = [key(names) for names in lists]
    assert len(set(keys)) == len(lists)
    assert key(["a", "b", "c"]) == keys[0]


def test_a_backslash_in_the_pod_keeps_names_without_a_newline_keyed_by_their_text():
    body = orjson.dumps(
        {
            "Pod": {"metadata": {"name": "p", "annotations": {"a": '{"b": "\\"c\\""}'}}},
            "NodeNames": ["x", "y"],
        }
    )
    assert b"\\" in body
    assert decode_extender_args(body).node_names_text == "x\ny"


def test_a_field_spelled_twice_takes_the_spelling_written_last_even_when_the_other_is_repeated():
    # Go decodes keys in text order: "NodeNames" is written last. A dict keeps it in its first place.
    body = b'{"NodeNames":null,"nodenames":["b"],"Pod":{"metadata":{"name":"p"}},"NodeNames":["a"]}'
    args = decode_extender_args(body)
    assert args.node_names == ["a"]
    bind = b'{"Node":"n1","PodName":"p","node":"n2","Node":"n3"}'
    assert decode_binding_args(bind).node == "n3"


def test_a_victims_field_spelled_twice_takes_the_spelling_written_last_even_when_the_other_is_repeated():
    # As at the top level: Go decodes every object's keys in text order, "Pods" is written last.
    victims = b'{"Pods":[],"pods":[{"UID":"u1"}],"NumPDBViolations":0,"Pods":[{"uid":"u2","UID":"u3"}]}'
    body = b'{"Pod":{"metadata":{"name":"p"}},"NodeNameToMetaVictims":{"n1":' + victims + b"}}"
    args = decode_preemption_args(body)
    assert args.victims["n1"].uids == ("u3",)


def _peak_bytes(parse: Callable[[], object]) -> int:
    tracemalloc.start()
    try:
        parse()
        return tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


def test_a_body_with_a_field_in_two_spellings_is_never_held_parsed_twice():
    # The text-order parse replaces the decoded body rather than joining it: a hostile body's peak stays
    # about that of one parse (300,000 empty arrays: some 30 times the body's size).
    padding = b"[" + b",".join([b"[]"] * 300_000) + b"]"
    pod = b'"Pod":{"metadata":{"name":"p"}},"x":' + padding
    body = b'{"nodenames":["b"],' + pod + b',"NodeNames":["a"]}'
    victims = b'"NodeNameToMetaVictims":{"n1":{"Pods":[],"pods":[{"UID":"u"}]}}'
    preempt = b"{" + pod + b"," + victims + b"}"
    once = _peak_bytes(lambda: orjson.loads(body))
    assert _peak_bytes(lambda: decode_extender_args(body)) < 1.15 * once
    assert _peak_bytes(lambda: decode_preemption_args(preempt)) < 1.15 * once


def test_bodies_decoded_at_once_on_several_threads_are_parsed_one_at_a_time():
    # Bind and preempt decode on worker threads, filter on the event loop: four hostile bodies parsed at
    # once held four trees of some 30 times their size. One at a time, the peak stays about one tree.
    padding = b"[" + b",".join([b"[]"] * 300_000) + b"]"
    body = b'{"PodName":"p","Node":"n","x":' + padding + b"}"
    once = _peak_bytes(lambda: orjson.loads(body))
    interval = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)  # switch threads as often as the interpreter can: parses would overlap
    start = threading.Barrier(4)
    decoded: list[str] = []

    def decode() -> None:
        start.wait()
        decoded.append(decode_binding_args(body).node)

    def decode_on_four_threads() -> None:
        threads = [threading.Thread(target=decode) for _ in range(4)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()

    try:
        peak = _peak_bytes(decode_on_four_threads)
    finally:
        sys.setswitchinterval(interval)
    assert decoded == ["n"] * 4
    assert peak < 1.2 * once


def test_a_field_in_two_spellings_in_a_deeply_nested_body_is_a_clear_error():
    # orjson takes 1000 levels; the standard library's parser runs out of recursion first where the
    # stack is already deep (a worker thread, the event loop): made certain here with a lower limit.
    nested = b"[" * 1000 + b"]" * 1000
    body = b'{"Pod":{"metadata":{"name":"p"}},"x":' + nested + b',"NodeNames":["a"],"nodenames":["b"]}'
    bind = b'{"PodName":"p","x":' + nested + b',"Node":"n1","node":"n2"}'
    victims = b'{"n1":{"Pods":[],"pods":[]}}'
    preempt = (
        b'{"Pod":{"metadata":{"name":"p"}},"x":' + nested + b',"NodeNameToMetaVictims":' + victims + b"}"
    )
    limit = sys.getrecursionlimit()
    sys.setrecursionlimit(len(inspect.stack()) + 300)
    try:
        with pytest.raises(WireError, match="nested too deeply"):
            decode_extender_args(body)
        with pytest.raises(WireError, match="nested too deeply"):
            decode_binding_args(bind)
        with pytest.raises(WireError, match="nested too deeply"):
            decode_preemption_args(preempt)
    finally:
        sys.setrecursionlimit(limit)


_name = st.text(st.sampled_from('ab"\\:,[]{}\n '), max_size=4)
_value = st.recursive(
    st.none() | st.integers(-3, 3) | _name,
    lambda inner: (
        st.lists(inner, max_size=3) | st.dictionaries(_name | st.just("NodeNames"), inner, max_size=3)
    ),
    max_leaves=8,
)
_member = st.tuples(st.sampled_from(["NodeNames", "nodenames", "NODENAMES", "Pod", "x"]), _value)


def _spelled(value: object, spaces: bool) -> bytes:
    """``value`` as JSON, with or without spaces after separators."""
    return json.dumps(value, separators=(", ", ": ") if spaces else (",", ":")).encode()


@given(
    st.lists(_member, max_size=4), st.lists(_name, max_size=4) | st.lists(_value, max_size=3), st.booleans()
)
def test_node_names_are_the_ones_written_last_and_keyed_by_their_text_only_without_newlines(
    members, names, spaces
):
    """Whatever precedes it, repeated and in other spellings: the NodeNames written last are decoded, and
    their joined text keys them only when no name holds a newline."""
    pairs = [*members, ("Pod", {"metadata": {"name": "p"}}), ("NodeNames", names)]
    body = b"{" + b",".join(orjson.dumps(k) + b":" + _spelled(v, spaces) for k, v in pairs) + b"}"
    try:
        args = decode_extender_args(body)
    except WireError as e:
        bad = next(i for i, name in enumerate(names) if not isinstance(name, str))
        assert str(e).startswith(f"NodeNames[{bad}]: must be a string")
        return
    assert args.node_names == names
    if args.node_names_text is not None:
        assert args.node_names_text == "\n".join(names) and not any("\n" in name for name in names)


_uids = st.lists(st.text(st.sampled_from('ab"\\:'), min_size=1, max_size=3), max_size=3)
_victims_member = st.tuples(
    st.sampled_from(["Pods", "pods", "PODS", "x"]), st.none() | _uids.map(lambda us: [{"UID": u} for u in us])
)


@given(st.lists(_victims_member, max_size=4), _uids, st.booleans())
def test_victims_pods_are_the_ones_written_last(members, uids, spaces):
    """Inside a node's victims as at the top level: the Pods written last are decoded."""
    pairs = [*members, ("Pods", [{"UID": u} for u in uids])]
    victims = b"{" + b",".join(orjson.dumps(k) + b":" + _spelled(v, spaces) for k, v in pairs) + b"}"
    body = b'{"Pod":{"metadata":{"name":"p"}},"NodeNameToMetaVictims":{"n1":' + victims + b"}}"
    assert decode_preemption_args(body).victims["n1"].uids == tuple(uids)


def test_decode_filter_with_node_objects():
    args = decode_extender_args(FILTER_NODES)
    assert args.node_names is None and args.node_names_text is None
    assert not args.node_cache_capable
    assert args.nodes == [orjson.loads(NODE_A), orjson.loads(NODE_B), orjson.loads(NODE_C)]
    assert args.candidate_names == ["node-a", "node-b", "node-c"]
    assert args.nodes_by_name is not None
    assert args.nodes_by_name["node-c"]["metadata"]["labels"] == {"zone": "z3"}


def test_decode_prioritize():
    args = decode_extender_args(PRIORITIZE)
    assert args.candidate_names == ["node-a", "node-d"]
    assert args.pod["metadata"]["name"] == "trainer-0"


def test_decode_bind():
    args = decode_binding_args(BIND)
    assert (args.pod_name, args.pod_namespace, args.pod_uid, args.node) == (
        "trainer-0",
        "ml",
        "6a1f9f4e-6c1e-4b7a-9a43-0d1f3c0b8e11",
        "node-a",
    )


def test_keys_are_matched_case_insensitively_and_unknown_keys_ignored():
    body = b'{"pod": {"metadata": {"name": "p"}}, "nodenames": ["n1"], "NODES": null, "Extra": 1}'
    args = decode_extender_args(body)
    assert args.pod == {"metadata": {"name": "p"}}
    assert args.node_names == ["n1"]
    bind = decode_binding_args(b'{"podname": "p", "PODNAMESPACE": "ns", "poduid": "u", "node": "n1", "x": 1}')
    assert (bind.pod_name, bind.pod_namespace, bind.pod_uid, bind.node) == ("p", "ns", "u", "n1")


def test_exact_key_is_found_among_case_variants_and_last_key_wins_like_go():
    # Go's decoder assigns every key that folds to the field, in document order: the last one wins.
    args = decode_extender_args(
        b'{"Pod": {"metadata": {"name": "a"}}, "pod": {"metadata": {"name": "b"}}, "NodeNames": []}'
    )
    assert args.pod["metadata"]["name"] == "b"


def test_node_names_win_over_nodes_when_both_are_sent():
    args = decode_extender_args(
        b'{"Pod": {"metadata": {"name": "p"}}, "NodeNames": ["n2"], '
        b'"Nodes": {"items": [{"metadata": {"name": "n1"}}]}}'
    )
    assert args.node_cache_capable
    assert args.candidate_names == ["n2"]


def test_bind_namespace_defaults_and_uid_is_optional():
    args = decode_binding_args(b'{"PodName": "p", "Node": "n"}')
    assert (args.pod_namespace, args.pod_uid) == ("default", "")


@pytest.mark.parametrize(
    ("body", "message"),
    [
        (b"", "malformed JSON"),
        (b'{"Pod": ', "malformed JSON"),
        (b"[]", "request body: must be a JSON object, got array"),
        (b'{"NodeNames": ["n"]}', "Pod: required"),
        (b'{"Pod": null, "NodeNames": ["n"]}', "Pod: required"),
        (b'{"Pod": [], "NodeNames": ["n"]}', "Pod: must be an object, got array"),
        (b'{"Pod": {}, "NodeNames": ["n"]}', "Pod.metadata: must be an object, got null"),
        (
            b'{"Pod": {"metadata": {"name": 7}}, "NodeNames": ["n"]}',
            "Pod.metadata.name: must be a string, got number",
        ),
        (b'{"Pod": {"metadata": {"name": ""}}, "NodeNames": ["n"]}', "Pod.metadata.name: must not be empty"),
        (
            b'{"Pod": {"metadata": {"name": "p", "namespace": 1}}, "NodeNames": []}',
            "Pod.metadata.namespace: must be a string, got number",
        ),
        (b'{"Pod": {"metadata": {"name": "p"}, "spec": []}, "NodeNames": []}', "Pod.spec: must be an object"),
        (
            b'{"Pod": {"metadata": {"name": "p"}, "spec": {"resourceClaims": [1]}}, "NodeNames": []}',
            "Pod.spec.resourceClaims[0]: must be an object, got number",
        ),
        (
            b'{"Pod": {"metadata": {"name": "p"}, "status": {"resourceClaimStatuses": [{"name": true}]}}, '
            b'"NodeNames": []}',
            "Pod.status.resourceClaimStatuses[0].name: must be a string, got boolean",
        ),
        (
            b'{"Pod": {"metadata": {"name": "p"}, "spec": {"resourceClaims": [{"name": "gpu", '
            b'"resourceClaimName": "c", "resourceClaimTemplateName": "t"}]}}, "NodeNames": []}',
            "Pod.spec.resourceClaims[0]: exactly one of `resourceClaimName`, `resourceClaimTemplateName` is "
            "required",
        ),
        (
            b'{"Pod": {"metadata": {"name": "p"}, "spec": {"resourceClaims": [{"name": "gpu", '
            b'"resourceClaimName": ""}]}}, "NodeNames": []}',
            "Pod.spec.resourceClaims[0]: exactly one of `resourceClaimName`, `resourceClaimTemplateName` is "
            "required",
        ),
        (b'{"Pod": {"metadata": {"name": "p"}}}', "Nodes, NodeNames: one of them is required"),
        (
            b'{"Pod": {"metadata": {"name": "p"}}, "Nodes": null, "NodeNames": null}',
            "Nodes, NodeNames: one of them is required",
        ),
        (
            b'{"Pod": {"metadata": {"name": "p"}}, "NodeNames": "x"}',
            "NodeNames: must be an array, got string",
        ),
        (b'{"Pod": {"metadata": {"name": "p"}}, "NodeNames": ["a", 2]}', "NodeNames[1]: must be a string"),
        (b'{"Pod": {"metadata": {"name": "p"}}, "Nodes": []}', "Nodes: must be an object, got array"),
        (b'{"Pod": {"metadata": {"name": "p"}}, "Nodes": {"items": {}}}', "Nodes.items: must be an array"),
        (
            b'{"Pod": {"metadata": {"name": "p"}}, "Nodes": {"items": [{"metadata": {}}]}}',
            "Nodes.items[0].metadata.name: must be a string, got null",
        ),
        (
            b'{"Pod": {"metadata": {"name": "p"}}, '
            b'"Nodes": {"items": [{"metadata": {"name": "n", "labels": []}}]}}',
            "Nodes.items[0].metadata.labels: must be an object, got array",
        ),
    ],
)
def test_extender_args_errors_name_the_field(body, message):
    with pytest.raises(WireError, match="^" + re.escape(message)):
        decode_extender_args(body)


@pytest.mark.parametrize(
    ("body", "message"),
    [
        (b"nope", "malformed JSON"),
        (b'"x"', "request body: must be a JSON object, got string"),
        (b'{"Node": "n"}', "PodName: required"),
        (b'{"PodName": "p"}', "Node: required"),
        (b'{"PodName": 1, "Node": "n"}', "PodName: must be a string, got number"),
        (b'{"PodName": "p", "Node": "n", "PodUID": {}}', "PodUID: must be a string, got object"),
    ],
)
def test_binding_args_errors_name_the_field(body, message):
    with pytest.raises(WireError, match="^" + re.escape(message)):
        decode_binding_args(body)


# --- encoding ------------------------------------------------------------------------------------------


def test_encode_filter_node_cache_capable_golden():
    args = decode_extender_args(FILTER_NODE_NAMES)
    outcome = FilterOutcome(
        passed=["node-a"],
        failed={"node-b": "dra-extender: no free device of class gpu.example.com"},
        unresolvable={"node-c": "dra-extender: node has no gpu.example.com devices"},
    )
    assert encode_filter_result(args, outcome) == (
        b'{"Nodes":null,"NodeNames":["node-a"],'
        b'"FailedNodes":{"node-b":"dra-extender: no free device of class gpu.example.com"},'
        b'"FailedAndUnresolvableNodes":{"node-c":"dra-extender: node has no gpu.example.com devices"},'
        b'"Error":""}'
    )


def test_encode_filter_with_node_objects_returns_them_unmodified_in_input_order():
    args = decode_extender_args(FILTER_NODES)
    outcome = FilterOutcome(passed=["node-c", "node-a"], failed={"node-b": "no free device"})
    decoded = orjson.loads(encode_filter_result(args, outcome))
    assert decoded == {
        "Nodes": {"metadata": {}, "items": [orjson.loads(NODE_A), orjson.loads(NODE_C)]},
        "NodeNames": None,
        "FailedNodes": {"node-b": "no free device"},
        "FailedAndUnresolvableNodes": {},
        "Error": "",
    }
    assert list(decoded) == ["Nodes", "NodeNames", "FailedNodes", "FailedAndUnresolvableNodes", "Error"]


def test_encode_filter_all_failed_and_error():
    args = decode_extender_args(FILTER_NODE_NAMES)
    assert encode_filter_result(args, FilterOutcome(error="claim ml/x: bad")) == (
        b'{"Nodes":null,"NodeNames":[],"FailedNodes":{},"FailedAndUnresolvableNodes":{},'
        b'"Error":"claim ml/x: bad"}'
    )
    nodes_args = decode_extender_args(FILTER_NODES)
    assert orjson.loads(encode_filter_result(nodes_args, FilterOutcome()))["Nodes"] == {
        "metadata": {},
        "items": [],
    }


def test_encode_filter_names_only_from_the_input_in_input_order():
    args = decode_extender_args(FILTER_NODE_NAMES)
    outcome = FilterOutcome(passed=["node-c", "stranger", "node-a"])
    assert orjson.loads(encode_filter_result(args, outcome))["NodeNames"] == ["node-a", "node-c"]


def test_encode_prioritize_is_a_bare_array():
    assert encode_host_priorities(["node-a", "node-d"], [7, 3]) == (
        b'[{"Host":"node-a","Score":7},{"Host":"node-d","Score":3}]'
    )
    assert encode_host_priorities([], []) == b"[]"


@given(
    st.lists(
        st.tuples(st.text(alphabet='ab-.,"%d\\\u00e9\n', max_size=4), st.integers(0, 10)), max_size=6
    ).map(lambda pairs: ([h for h, _ in pairs], [s for _, s in pairs]))
)
def test_encode_prioritize_equals_encoding_one_object_per_host(hosts_and_scores):
    hosts, scores = hosts_and_scores
    expected = orjson.dumps([{"Host": h, "Score": s} for h, s in zip(hosts, scores, strict=True)])
    assert encode_host_priorities(hosts, scores) == expected
    assert encode_host_priorities(hosts, [5] * len(hosts)) == orjson.dumps(
        [{"Host": h, "Score": 5} for h in hosts]
    )


def test_encode_filter_every_node_passing_answers_the_names_as_sent():
    args = decode_extender_args(FILTER_NODE_NAMES)
    outcome = FilterOutcome(passed=[n.encode().decode() for n in args.candidate_names])  # equal, not the same
    assert orjson.loads(encode_filter_result(args, outcome))["NodeNames"] == args.candidate_names


def test_encode_bind_and_error():
    assert encode_binding_result() == b'{"Error":""}'
    assert encode_binding_result("claim ml/trainer-0-gpu-7xk2p: conflict") == (
        b'{"Error":"claim ml/trainer-0-gpu-7xk2p: conflict"}'
    )
    assert encode_error("Pod: required") == b'{"Error":"Pod: required"}'


@pytest.mark.parametrize(
    ("pod_spec", "message"),
    [
        ({"containers": {"a": 1}}, "Pod.spec.containers: must be an array"),
        (
            {"containers": [{"name": "c", "resources": {"limits": ["x"]}}]},
            "Pod.spec.containers[0].resources.limits: must be an object",
        ),
        ({"initContainers": ["x"]}, "Pod.spec.initContainers[0]: must be an object"),
    ],
)
def test_container_resources_are_checked_where_extended_resources_are_read(pod_spec, message):
    body = orjson.dumps({"Pod": {"metadata": {"name": "p"}, "spec": pod_spec}, "NodeNames": ["n"]})
    with pytest.raises(WireError, match=re.escape(message)):
        decode_extender_args(body)


def _deep(levels: int) -> bytes:
    """A JSON value ``levels`` objects deep."""
    return b'{"k":' * levels + b"1" + b"}" * levels


@pytest.mark.parametrize("levels", [300, 1000])
def test_a_pod_nested_deeper_than_the_extender_encodes_is_a_400_naming_it(levels):
    # orjson reads 1024 levels but writes at most 254: the pod's spec digest (and the answer) broke with
    # an internal error (500, a traceback in the log).
    body = b'{"Pod": {"metadata": {"name": "p"}, "spec": {"x": ' + _deep(levels) + b'}}, "NodeNames": ["n"]}'
    with pytest.raises(WireError, match=r"^Pod: nested more than 254 levels deep$"):
        decode_extender_args(body)
    with pytest.raises(WireError, match=r"^Pod: nested more than 254 levels deep$"):
        decode_preemption_args(body)


def test_nodes_nested_deeper_than_the_extender_encodes_are_a_400_naming_them():
    # Filter answers with the received Node objects: encoding them was the 500.
    body = (
        b'{"Pod": {"metadata": {"name": "p"}}, "Nodes": {"items": [{"metadata": {"name": "n"}, "x": '
        + _deep(300)
        + b"}]}}"
    )
    with pytest.raises(WireError, match=r"^Nodes: nested more than 254 levels deep$"):
        decode_extender_args(body)


def test_a_pod_250_levels_deep_is_accepted():
    # The pod is level 1, its spec 2, x 3: 250 levels in all, below orjson's limit.
    body = b'{"Pod": {"metadata": {"name": "p"}, "spec": {"x": ' + _deep(248) + b'}}, "NodeNames": ["n"]}'
    args = decode_extender_args(body)
    assert orjson.dumps(args.pod)  # what the service will do with it
