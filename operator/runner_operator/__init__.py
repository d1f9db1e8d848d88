"""Kubernetes operator for CoreWeave Sandbox managed runners."""
