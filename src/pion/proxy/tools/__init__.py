"""``pion serve-tools``: offline tools around pion-serve (Q&A generation, replay)."""
