// A tiny module that runs Argo CD resource health scripts exactly the way Argo CD does:
// gopher-lua with the standard libraries skipped (ConfigMap scripts) or open (built-in scripts).
// Kept apart from tests/testenv so it does not inherit the Kubernetes module graph.
module argocd-healthcheck

go 1.26.0

require (
	github.com/yuin/gopher-lua v1.1.2
	layeh.com/gopher-json v0.0.0-20190114024228-97fed8db8427
	sigs.k8s.io/yaml v1.6.0
)

require go.yaml.in/yaml/v2 v2.4.2 // indirect
