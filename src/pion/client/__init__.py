"""Client library: the typed connection (PionClient), PionPromptCache and the model runtimes.

Nothing here is imported by ``import pion``; torch-using modules load on first use.
"""
