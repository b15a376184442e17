"""Pion inside other serving engines: an LMCache remote storage plugin and a vLLM KV connector.

Each subpackage imports its engine (``lmcache``, ``vllm``) only in the module the engine loads
by name, so ``import pion`` and ``import pion.integrations`` stay free of both (they live in their
own venvs: docs/integrations.md). The Pion side of each (namespaces, row layout, one-round-trip
pipelines) is plain ``pion.client`` code that the main test suite exercises against a real server.
"""
