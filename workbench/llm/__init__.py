"""The LLM substrate that the explain and score stages run on: client, config, response cache, usage ledger, strict JSON parsing."""
