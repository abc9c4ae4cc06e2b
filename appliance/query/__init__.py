"""Query side: fuse the vector and keyword rankings, then assemble passages."""
