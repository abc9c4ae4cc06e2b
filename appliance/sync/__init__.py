"""Files on disk into stored chunks: the runner, the plan, convert, cut, embed, write; jobs, state, hand-off."""
