#!/usr/bin/env bash
# Writes upstream's shared allocator table as oracle states to $1 (JSON lines, see export_test.go.txt).
# The module is copied at test time from the Go module cache into .cache/upstream-table/ (never
# committed), at the version tests/oracle/go.mod pins, and our exporter is added to the copy.
set -euo pipefail
out=$(realpath -m "$1")
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../../.." && pwd)
work="$root/.cache/upstream-table"
module=$(cd "$root/tests/oracle" && go mod download -json k8s.io/dynamic-resource-allocation |
	sed -n 's/^\t"Dir": "\(.*\)",$/\1/p')
[ -d "$module" ] || { echo "upstream table: k8s.io/dynamic-resource-allocation not in the module cache" >&2; exit 1; }
rm -rf "$work/module"
mkdir -p "$work"
cp -r "$module" "$work/module"
chmod -R u+w "$work/module"
mkdir "$work/module/structured/internal/upstreamtable"
cp "$here/export_test.go.txt" "$work/module/structured/internal/upstreamtable/export_test.go"
cd "$work/module"
UPSTREAM_TABLE_OUT="$out.tmp" GOFLAGS=-mod=mod go test -count=1 -run '^TestExport$' \
	./structured/internal/upstreamtable/ >"$work/go-test.log" 2>&1 ||
	{ tail -40 "$work/go-test.log" >&2; echo "upstream table: export failed (log: $work/go-test.log)" >&2; exit 1; }
mv "$out.tmp" "$out"
echo "upstream table: $(wc -l <"$out") cases in $out"
