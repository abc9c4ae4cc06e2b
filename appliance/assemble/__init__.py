"""Ranked chunks and stored documents into what a reader gets: passages, pages, citations, ranges."""
