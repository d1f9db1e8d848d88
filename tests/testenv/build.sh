#!/usr/bin/env bash
# Builds the real kube-apiserver, kube-controller-manager, etcd and kubectl (one Kubernetes module graph),
# helm v4, Prometheus' promtool and helm-docs (each its own module graph), and the project's own
# managed-runner-validate (cmd/: the API server's CRD validation, for `plan` offline) into bin/.
# Idempotent: skips the build when bin/.stamp matches the hash of go.mod, go.sum, the validator's
# sources, this script and the flags.
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
cd "$here"
validator="$here/../../cmd/managed-runner-validate"

K8S_VERSION=v1.37.2
ETCD_PKG=go.etcd.io/etcd/server/v3
HELM_VERSION=v4.3.2
# Prometheus v3.x is published to the Go proxy as v0.3xx.y (v0.316.0 = Prometheus 3.16.0).
PROMETHEUS_VERSION=v0.316.0
HELM_DOCS_VERSION=v1.14.2
export CGO_ENABLED=0 GOFLAGS=-buildvcs=false GOTOOLCHAIN=local

vp=k8s.io/component-base/version
cp=k8s.io/client-go/pkg/version
minor="$(echo "$K8S_VERSION" | cut -d. -f2)"
vflags=""
for p in "$vp" "$cp"; do
  vflags+=" -X $p.gitVersion=$K8S_VERSION -X $p.gitMajor=1 -X $p.gitMinor=$minor"
  vflags+=" -X $p.gitTreeState=clean -X $p.gitCommit=0000000000000000000000000000000000000000"
  vflags+=" -X $p.buildDate=1970-01-01T00:00:00Z"
done
K8S_LDFLAGS="-s -w$vflags"
HELM_LDFLAGS="-s -w -X helm.sh/helm/v4/internal/version.version=$HELM_VERSION -X helm.sh/helm/v4/internal/version.gitTreeState=clean"

key="$(cat go.mod go.sum build.sh "$validator"/go.mod "$validator"/go.sum "$validator"/*.go | sha256sum | cut -d' ' -f1)"
if [[ -f bin/.stamp && "$(cat bin/.stamp)" == "$key" ]] \
   && [[ -x bin/kube-apiserver && -x bin/kube-controller-manager && -x bin/etcd && -x bin/kubectl && -x bin/helm && -x bin/promtool && -x bin/helm-docs \
   && -x bin/managed-runner-validate ]]; then
  echo "testenv: binaries up to date (bin/, key ${key:0:12})"
  exit 0
fi

command -v go >/dev/null || { echo "testenv: go is not installed (Go >= 1.26 is required)" >&2; exit 1; }
mkdir -p bin
rm -f bin/.stamp
start=$SECONDS
step() { echo "testenv: [$((SECONDS - start))s] $*"; }

step "downloading modules (go mod download)"
go mod download
step "building kube-apiserver $K8S_VERSION"
go build -trimpath -ldflags "$K8S_LDFLAGS" -o bin/kube-apiserver k8s.io/kubernetes/cmd/kube-apiserver
step "building kube-controller-manager $K8S_VERSION (namespace deletion, garbage collection)"
go build -trimpath -ldflags "$K8S_LDFLAGS" -o bin/kube-controller-manager k8s.io/kubernetes/cmd/kube-controller-manager
step "building etcd ($(go list -m -f '{{.Version}}' $ETCD_PKG))"
go build -trimpath -ldflags "-s -w" -o bin/etcd "$ETCD_PKG"
step "building kubectl $K8S_VERSION"
go build -trimpath -ldflags "$K8S_LDFLAGS" -o bin/kubectl k8s.io/kubernetes/cmd/kubectl
step "building helm $HELM_VERSION (own module graph)"
GOBIN="$here/bin" go install -trimpath -ldflags "$HELM_LDFLAGS" "helm.sh/helm/v4/cmd/helm@$HELM_VERSION"
step "building promtool (Prometheus $PROMETHEUS_VERSION; rule and metrics checks)"
# remove_all_sd leaves out the service-discovery plugins (cloud SDKs) promtool's checks never use: half the build time.
GOBIN="$here/bin" go install -tags remove_all_sd -trimpath -ldflags "-s -w" \
  "github.com/prometheus/prometheus/cmd/promtool@$PROMETHEUS_VERSION"
step "building helm-docs $HELM_DOCS_VERSION (the chart README from values.yaml)"
GOBIN="$here/bin" go install -trimpath -ldflags "-s -w" "github.com/norwoodj/helm-docs/cmd/helm-docs@$HELM_DOCS_VERSION"
step "building managed-runner-validate (its go.mod pins the API server's versions: a cached build)"
(cd "$validator" && go build -trimpath -ldflags "-s -w" -o "$here/bin/managed-runner-validate" .)
echo "$key" > bin/.stamp
step "done: $(ls bin | tr '\n' ' ')"
