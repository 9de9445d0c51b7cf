"""The LLM substrate every LLM-using explainer and scorer runs on: client, config, response cache, usage ledger, strict JSON parsing."""
