"""Offline data that installs from package registries (no hub access needed)."""

from .corpus import Book, corpus_description, offline_books, prose

__all__ = ["Book", "corpus_description", "offline_books", "prose"]
