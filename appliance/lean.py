"""Keep pandas from being imported as a side effect of importing lancedb.

`pyarrow.dataset`, which lancedb imports, probes whether pandas is installed by
importing all of it: about 1.3 s of CPU and ~60 MB in every process that opens
the index, although the index code never builds a DataFrame. Only the
spreadsheet converter needs pandas, and it imports pandas itself when it runs
(it is not affected: the probe is hidden only while lancedb is being imported).
pyarrow then treats pandas as absent, which only matters for `to_pandas()`,
a call the appliance does not make.
"""
from __future__ import annotations

import importlib.abc
import sys
from contextlib import contextmanager
from typing import Iterator


class _HidePandas(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path, target=None):  # type: ignore[no-untyped-def]
        if name == "pandas" or name.startswith("pandas."):
            raise ModuleNotFoundError("pandas is hidden while the index libraries load", name=name)
        return None


@contextmanager
def pandas_hidden() -> Iterator[None]:
    """Within the block `import pandas` fails, unless pandas was imported before (then nothing changes)."""
    finder = _HidePandas()
    sys.meta_path.insert(0, finder)
    try:
        yield
    finally:
        sys.meta_path.remove(finder)
