"""The ways in: the container's entrypoint, the MCP server (stdio and HTTP), the CLI, the status page and
the scheduler, each thin over the service."""
