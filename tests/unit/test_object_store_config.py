"""DB_PATH=s3://bucket/prefix: what config.py resolves from it, and how an object store's failures are named."""
from __future__ import annotations

from pathlib import Path

import pytest

from appliance.config import load_settings
from appliance.errors import ConfigError, DiskFull, StorageUnreachable, object_store_error

SECRET = "wJalrXUtnFEMI-K7MDENG-bPxRfiCYEXAMPLEKEY"
BASE = {"BASE_DIR": "/tmp", "DB_PATH": "s3://team-docs/minirag/index", "AWS_ACCESS_KEY_ID": "AKIAEXAMPLEKEYID",
        "AWS_SECRET_ACCESS_KEY": SECRET, "AWS_DEFAULT_REGION": "eu-central-1"}


def test_a_bucket_uri_puts_the_tables_in_the_bucket_and_the_state_in_a_local_directory(tmp_path: Path) -> None:
    settings = load_settings({**BASE, "STATE_DIR": str(tmp_path / "state")})
    assert settings.bucket is not None and settings.bucket.uri == "s3://team-docs/minirag/index"
    assert settings.db_path == tmp_path / "state"
    assert settings.bucket.region == "eu-central-1"
    options = settings.bucket.storage_options()
    assert options["aws_secret_access_key"] == SECRET and options["aws_region"] == "eu-central-1"
    view = settings.describe()
    assert view.db_path == "s3://team-docs/minirag/index" and view.state_dir == str(tmp_path / "state")
    for shown in (repr(settings), str(view.wire()), repr(view)):
        assert SECRET not in shown and "AKIAEXAMPLEKEYID" not in shown


def test_a_local_db_path_is_unchanged() -> None:
    settings = load_settings({"BASE_DIR": "/tmp", "DB_PATH": "/srv/index"})
    assert settings.bucket is None and settings.db_path == Path("/srv/index")
    assert settings.describe().state_dir is None


@pytest.mark.parametrize(("env", "named"), [
    ({"DB_PATH": "s3://AB/x"}, "not an S3 bucket name"),
    ({"DB_PATH": f"s3://key:{SECRET}@bucket/x"}, "without credentials"),
    ({"AWS_ENDPOINT_URL": "http://minio:9000"}, "S3_ALLOW_HTTP=1"),
    ({"AWS_ENDPOINT_URL": "ftp://minio"}, "AWS_ENDPOINT_URL must be an http(s) URL"),
])
def test_a_bad_bucket_setting_is_a_named_error_without_the_secret(env: dict[str, str], named: str) -> None:
    with pytest.raises(ConfigError) as caught:
        load_settings({**BASE, **env})
    assert named in caught.value.message + (caught.value.hint or "")
    assert SECRET not in caught.value.message


def test_an_endpoint_with_allow_http_is_taken() -> None:
    bucket = load_settings({**BASE, "AWS_ENDPOINT_URL": "http://127.0.0.1:9000/", "S3_ALLOW_HTTP": "1"}).bucket
    assert bucket is not None and bucket.endpoint == "http://127.0.0.1:9000" and bucket.allow_http
    assert bucket.storage_options()["allow_http"] == "true"


BODY = ('Generic S3 error: Error performing GET http://127.0.0.1:9/b?list-type=2 - Server returned 403: <?xml?>'
        '<Error><Code>{code}</Code><Message>...</Message><AWSAccessKeyId>AKIAEXAMPLEKEYID</AWSAccessKeyId></Error>')


@pytest.mark.parametrize(("code", "kind", "says"), [
    ("NoSuchBucket", StorageUnreachable, "does not exist"),
    ("SignatureDoesNotMatch", StorageUnreachable, "refused the credentials"),
    ("InvalidAccessKeyId", StorageUnreachable, "refused the credentials"),
    ("QuotaExceeded", DiskFull, "is full"),
    ("XMinioStorageFull", DiskFull, "is full"),
])
def test_an_object_store_failure_is_named_by_its_code_never_by_its_body(code: str, kind: type, says: str) -> None:
    error = object_store_error(BODY.format(code=code), "the index at s3://b/x")
    assert isinstance(error, kind) and says in error.message and "s3://b/x" in error.message
    assert "AKIAEXAMPLEKEYID" not in error.message


def test_an_endpoint_that_does_not_answer_is_named() -> None:
    error = object_store_error("Generic S3 error: error sending request for url (http://127.0.0.1:9/b/x): "
                               "operation timed out", "the index at s3://b/x")
    assert isinstance(error, StorageUnreachable) and "did not answer" in error.message
    assert object_store_error("something else entirely", "the index at s3://b/x") is None


@pytest.mark.parametrize("text", [
    # LanceDB 0.40's words for a query and a merge given a timeout they outran (Tables.deadline)
    "lance error: Query Execution error: Execution error: Query timeout after 120000 ms",
    "Runtime error: merge insert timed out",
])
def test_a_read_or_write_past_its_deadline_is_named_as_an_endpoint_that_does_not_answer(text: str) -> None:
    error = object_store_error(text, "the index at s3://b/x")
    assert isinstance(error, StorageUnreachable)
    assert "did not answer in time" in error.message and "S3_TIMEOUT" in error.message and "s3://b/x" in error.message
