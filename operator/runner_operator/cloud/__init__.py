"""CoreWeave control-plane API client: wire models, errors, retries, budget. Never imports kopf."""
