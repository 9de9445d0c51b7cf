"""The explain stage: the `Explainer` protocol, one module per explainer, registry, prompts, job, Ray backend."""
