"""The real Kubernetes control plane (etcd + kube-apiserver) used by the end-to-end tests and the demo."""
