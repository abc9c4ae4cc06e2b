"""minirag appliance: offline document search for AI agents."""
