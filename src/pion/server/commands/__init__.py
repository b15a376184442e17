"""Command families, one module each, joined in one table (commands/table.py)."""
