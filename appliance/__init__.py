"""minirag appliance: offline document search for AI agents."""
from importlib.metadata import PackageNotFoundError, version

from appliance.platform import netguard

# Before any module of ours can import onnxruntime (its telemetry starts with the import):
# every process that runs appliance code (CLI, servers, scheduler, conversion workers)
# imports this package first.
netguard.apply_offline_env()

try:
    __version__ = version("minirag-appliance")
except PackageNotFoundError:  # running from a source tree that was never installed
    __version__ = "0.0.0+unknown"
