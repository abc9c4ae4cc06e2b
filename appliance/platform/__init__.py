"""The process underneath everything: the egress guard, import hiding, the allocator, prompt clean stops."""
