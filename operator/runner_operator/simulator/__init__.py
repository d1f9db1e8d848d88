"""A local CoreWeave Sandboxes control plane serving the API contract over HTTP (aiohttp)."""
