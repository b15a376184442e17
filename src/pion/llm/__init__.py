"""pion-llm: a local OpenAI-compatible inference server whose prompts reuse prefixes held in pion-server."""
