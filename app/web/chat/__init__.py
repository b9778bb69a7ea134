"""Ask TierOps over HTTP: the OpenAI- and Ollama-compatible chat APIs and what they share."""
