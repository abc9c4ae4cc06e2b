"""`minirag sync --ray ADDRESS`: the local reconcile, with conversion, chunking and embedding run as Ray tasks.

The driver (`driver.py`) is an ordinary local sync: discovery, ignore rules, containment, the
sync lock, run identity, snapshot de-duplication and failures by name are the service's own
code. The one seam is the sync's indexer (indexing.Indexer, passed to `Appliance.sync`): the
`RayIndexer` receives the files to (re)index and hands them to Ray tasks (`node.py`), each of which converts, cuts and
embeds on its node with that node's baked model, verified against the driver's manifest
hashes. The driver is the only writer: it commits the tasks' rows to the index in batches.

Ray is an optional dependency (`pip install 'minirag-appliance[cluster]'`); nothing here imports
it at module level, so the default install and image never load it.
"""
from __future__ import annotations

from appliance.errors import ApplianceError, Hint, NextAction


class ClusterUnavailable(ApplianceError):
    code = "cluster_unavailable"
    hint = "Install the cluster extra: pip install 'minirag-appliance[cluster]' (it adds Ray)."


class ClusterUnreachable(ApplianceError):
    code = "cluster_unreachable"
    hint = ("Start the head node (`ray start --head --port 6379`) and give its address as --ray HOST:PORT "
            "or RAY_ADDRESS; nothing was written to the index.")


class NodeMismatch(ApplianceError):
    code = "cluster_node_mismatch"
    hint = Hint("Every node must run the same appliance version with the same baked model: copy the driver's "
                "models/baked folder to the node (or bake it there) and check it with {}.", NextAction("models verify"))
