"""The LanceDB index: tables, writes and upkeep, the source registry, reads and rankers, the sync lock."""
