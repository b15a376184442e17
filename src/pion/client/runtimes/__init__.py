"""Model runtimes, one module per framework (transformers today), imported lazily."""
