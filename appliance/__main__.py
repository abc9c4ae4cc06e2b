"""`python -m appliance` runs the minirag command."""
from appliance.adapters.cli import main

main()
