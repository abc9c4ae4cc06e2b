"""A query into ranked chunks: the vector and keyword sides, translation, compounds, fusion, grep."""
