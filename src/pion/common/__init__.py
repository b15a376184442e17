"""Shared leaf utilities: errors, sizes, typed ids. Imports nothing else of ours."""
