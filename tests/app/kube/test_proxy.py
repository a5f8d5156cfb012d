"""app.kube.proxy: the API server's proxy from the environment. Expected values follow the rules Go's
net/http documents for ProxyFromEnvironment and httpproxy.Config (what client-go and kubectl use), worked
out by hand for each case."""

from __future__ import annotations

import pytest

from app.kube.proxy import proxy_for

PROXY = "http://proxy.example:3128"


@pytest.mark.parametrize(
    ("server", "environ", "expected"),
    [
        # Which variable: by the server's scheme, upper case first, lower case when that is unset or empty.
        ("https://10.0.0.1:6443", {"HTTPS_PROXY": PROXY}, PROXY),
        ("https://10.0.0.1:6443", {"https_proxy": PROXY}, PROXY),
        ("https://10.0.0.1:6443", {"HTTPS_PROXY": PROXY, "https_proxy": "http://other:1"}, PROXY),
        ("https://10.0.0.1:6443", {"HTTPS_PROXY": "", "https_proxy": PROXY}, PROXY),
        ("https://10.0.0.1:6443", {"HTTP_PROXY": PROXY}, None),  # HTTP_PROXY is for http servers
        ("http://10.0.0.1:8080", {"HTTP_PROXY": PROXY}, PROXY),
        ("http://10.0.0.1:8080", {"HTTP_PROXY": PROXY, "REQUEST_METHOD": "GET"}, None),  # CGI
        ("https://10.0.0.1:6443", {"HTTPS_PROXY": PROXY, "REQUEST_METHOD": "GET"}, PROXY),
        ("https://10.0.0.1:6443", {}, None),
        # A value without a scheme is http; credentials stay in the URL.
        ("https://10.0.0.1:6443", {"HTTPS_PROXY": "proxy.example:3128"}, PROXY),
        (
            "https://10.0.0.1:6443",
            {"HTTPS_PROXY": "http://u:p@proxy.example:3128"},
            "http://u:p@proxy.example:3128",
        ),
        # Never for localhost or loopback addresses.
        ("https://localhost:6443", {"HTTPS_PROXY": PROXY}, None),
        ("https://127.0.0.1:6443", {"HTTPS_PROXY": PROXY}, None),
        ("https://127.8.9.1:6443", {"HTTPS_PROXY": PROXY}, None),
        ("https://[::1]:6443", {"HTTPS_PROXY": PROXY}, None),
    ],
)
def test_which_proxy(server: str, environ: dict[str, str], expected: str | None) -> None:
    assert proxy_for(server, environ) == expected


@pytest.mark.parametrize(
    ("server", "no_proxy", "proxied"),
    [
        ("https://10.0.0.1:6443", "*", False),
        ("https://10.0.0.1:6443", " 10.0.0.1 ", False),
        ("https://10.0.0.2:6443", "10.0.0.1", True),
        # CIDR ranges: the in-cluster Service address in the Service range.
        ("https://10.96.0.1:443", "10.96.0.0/12", False),
        ("https://10.112.0.1:443", "10.96.0.0/12", True),
        ("https://[fd00::5]:443", "fd00::/64", False),
        ("https://10.96.0.1:443", "fd00::/64", True),
        # A port in the entry names the server on that port only; the server's default port counts.
        ("https://10.0.0.1:6443", "10.0.0.1:6443", False),
        ("https://10.0.0.1:6443", "10.0.0.1:443", True),
        ("https://10.0.0.1", "10.0.0.1:443", False),
        ("https://[fd00::1]:443", "[fd00::1]:443", False),
        ("https://[fd00::1]:443", "fd00::1", False),
        # Domains: the name and its subdomains; with a leading "." or "*." the subdomains only.
        ("https://corp.example:6443", "corp.example", False),
        ("https://api.corp.example:6443", "corp.example", False),
        ("https://api.corp.example:6443", "CORP.example", False),
        ("https://notcorp.example:6443", "corp.example", True),
        ("https://corp.example:6443", ".corp.example", True),
        ("https://api.corp.example:6443", ".corp.example", False),
        ("https://corp.example:6443", "*.corp.example", True),
        ("https://api.corp.example:6443", "*.corp.example", False),
        ("https://kubernetes.default.svc", ".svc,.cluster.local", False),
        ("https://api.corp.example:6443", "corp.example:443", True),
        ("https://API.Corp.Example:6443", "corp.example", False),
        # A domain never names an address; empty and malformed entries are skipped.
        ("https://10.0.0.1:6443", "example.com, ,10.0.0.0/99", True),
        # Forms Go reads as names of nothing: brackets without a port, a netmask, "*" without a dot.
        ("https://[fd00::1]:443", "[fd00::1]", True),
        ("https://10.0.0.1:6443", "10.0.0.0/255.0.0.0", True),
        ("https://corp.example:6443", "*corp.example", True),
        ("https://api.corp.example:6443", "*corp.example", True),
    ],
)
def test_no_proxy(server: str, no_proxy: str, proxied: bool) -> None:
    for variable in ("NO_PROXY", "no_proxy"):
        got = proxy_for(server, {"HTTPS_PROXY": PROXY, variable: no_proxy})
        assert got == (PROXY if proxied else None), variable


def test_no_proxy_upper_case_first() -> None:
    environ = {"HTTPS_PROXY": PROXY, "NO_PROXY": "other.example", "no_proxy": "10.0.0.1"}
    assert proxy_for("https://10.0.0.1:6443", environ) == PROXY


@pytest.mark.parametrize("value", [f"{PROXY}\n", f" {PROXY}", "proxy.example:3128\n"])
def test_a_proxy_go_cannot_parse_is_no_proxy(value: str) -> None:
    # A leading space or a control character (a value written from a file): Go's URL parser refuses it,
    # with and without "http://" before it, and Go uses no proxy.
    assert proxy_for("https://10.0.0.1:6443", {"HTTPS_PROXY": value}) is None
