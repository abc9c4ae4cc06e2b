"""Ingest: discovery, conversion and chunking of documents."""
