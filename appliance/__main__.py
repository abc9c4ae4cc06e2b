"""`python -m appliance` runs the minirag command."""
from appliance.cli import main

main()
