"""An index whose identity.json names another chunking scheme (issue 28 Build 5): served, with a
warning in `status`, and re-stamped by the plain sync that leaves no chunk of another scheme;
another model is still refused."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from appliance.errors import IndexMismatch
from appliance.ingest.chunk import SCHEME_VERSION
from appliance.storage.tables import IDENTITY_FILE
from tests.integration.test_emptied_root import _app


def _edit_identity(db: Path, **changes: object) -> None:
    path = db / IDENTITY_FILE
    path.write_text(json.dumps(json.loads(path.read_text()) | changes))


def test_another_chunking_scheme_is_served_with_a_warning_until_a_sync_recuts(tmp_path: Path) -> None:
    docs = tmp_path / "docs"
    docs.mkdir()
    (docs / "pump.md").write_text("# Pump\n\nThe impeller of pump P-17 is replaced every spring.\n")
    app = _app(tmp_path, docs)
    app.sync()
    _edit_identity(tmp_path / "db", scheme="structure-v0")
    index = app.status().index
    assert index is not None and index.identity_mismatch is None
    assert index.scheme_warning and "'structure-v0'" in index.scheme_warning and SCHEME_VERSION in index.scheme_warning
    assert app.search("impeller P-17", top_k=1).results  # same model, same vector space: answered
    app.sync()  # nothing of another scheme is left, so the index says what it is
    assert app.index.read_identity().scheme == SCHEME_VERSION  # type: ignore[union-attr]
    assert app.status().index.scheme_warning is None  # type: ignore[union-attr]
    _edit_identity(tmp_path / "db", model_id="some/other-model")
    with pytest.raises(IndexMismatch, match="some/other-model"):
        app.search("impeller", top_k=1)
