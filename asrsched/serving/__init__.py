"""Real serving: the policy-ordered HTTP server, its engine and metrics, the load generator, serving experiments."""
