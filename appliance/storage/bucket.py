"""The small shared state of an index in a bucket (DB_PATH=s3://...): identity.json and the writer lease.

LanceDB keeps the tables in the bucket itself; what the appliance kept beside them as plain files splits
in two. What belongs to one host (its sync lock, progress, last sync, scheduler record, hand-off socket)
stays in a local state directory (`Settings.db_path`); what every host must agree on lives here, as
objects under the index's prefix, through obstore (the same Rust object-store client LanceDB uses).

The one-writer rule across hosts is a lease object taken with a conditional put: ``If-None-Match: *``
creates it, ``If-Match: <etag>`` renews or takes over an expired one, so two hosts can never both hold
it (S3 since 2024, MinIO, Ceph RGW, R2 and moto support both). The holder renews it while its sync runs;
a lease not renewed for LEASE_SECONDS (its host died) is taken over. Hosts are assumed to keep their
clocks within a few seconds of each other (NTP), far below LEASE_SECONDS.
"""
from __future__ import annotations

import json
import logging
import os
import socket
import threading
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import timedelta
from typing import Any

import obstore
from obstore.exceptions import AlreadyExistsError, BaseError, PreconditionError
from obstore.store import S3Store

from appliance.config import Bucket
from appliance.errors import ApplianceError, StorageUnreachable, SyncBusy, object_store_error

log = logging.getLogger(__name__)

LEASE_OBJECT = ".writer-lease.json"
LEASE_SECONDS = 60.0
"""A lease not renewed for this long is taken over: its holder died (renewed every third of it)."""


class SharedObjects:
    """JSON objects under the index's prefix in its bucket, read and written whole."""

    def __init__(self, bucket: Bucket) -> None:
        self.bucket = bucket
        self._store: S3Store | None = None

    @property
    def where(self) -> str:
        return f"the index at {self.bucket.uri}"

    def store(self) -> S3Store:
        if self._store is None:
            b = self.bucket
            config: Any = {key.removeprefix("aws_"): value for key, value in b.storage_options().items()
                           if key.startswith("aws_")}
            if b.allow_http:
                config["allow_http"] = True
            retry: Any = {"max_retries": 2, "backoff": {"init_backoff": timedelta(milliseconds=100),
                                                        "max_backoff": timedelta(seconds=2), "base": 2.0},
                          "retry_timeout": timedelta(seconds=b.timeout_s * 2)}
            self._store = S3Store(b.name, prefix=b.prefix or None, config=config,
                                  client_options={"timeout": f"{b.timeout_s:g}s",
                                                  "connect_timeout": f"{min(b.timeout_s, 5.0):g}s"},
                                  retry_config=retry)
        return self._store

    def read(self, name: str) -> tuple[dict[str, Any], str | None] | None:
        """The object's JSON and its ETag; None when there is none."""
        try:
            got = obstore.get(self.store(), name)
            data = json.loads(bytes(got.bytes()))
        except FileNotFoundError:
            return None
        except ValueError as exc:
            raise StorageUnreachable(f"{name} in {self.where} is not JSON: {exc}") from None
        except (BaseError, OSError) as exc:  # obstore's own, or a timeout the runtime raises
            raise self.error(exc) from None
        return (data if isinstance(data, dict) else {}), got.meta.get("e_tag")

    def write(self, name: str, data: dict[str, Any], *, etag: str | None = None, create: bool = False) -> str | None:
        """Put the object; `create`: only if absent, `etag`: only if unchanged since read. Returns its new
        ETag; raises AlreadyExistsError / PreconditionError when the condition failed."""
        mode: Any = "create" if create else {"e_tag": etag} if etag else "overwrite"
        try:
            return obstore.put(self.store(), name, json.dumps(data, indent=2).encode(), mode=mode).get("e_tag")
        except (AlreadyExistsError, PreconditionError):
            raise
        except (BaseError, OSError) as exc:  # obstore's own, or a timeout the runtime raises
            raise self.error(exc) from None

    def delete(self, name: str) -> None:
        try:
            obstore.delete(self.store(), name)
        except FileNotFoundError:
            pass
        except (BaseError, OSError) as exc:  # obstore's own, or a timeout the runtime raises
            raise self.error(exc) from None

    def error(self, exc: BaseException) -> ApplianceError:
        """The named error for a failed request (never the server's body nor a credential)."""
        return object_store_error(str(exc), self.where) or StorageUnreachable(
            f"A request on {self.where} failed ({type(exc).__name__})")


class WriterLease:
    """This process's hold on the bucket's writer lease, renewed on a thread of its own until released."""

    def __init__(self, shared: SharedObjects, state_dir: str, *, seconds: float = LEASE_SECONDS) -> None:
        self.shared = shared
        self.state_dir = state_dir
        """This host's state directory: whose sync lock the caller holds."""
        self.seconds = seconds
        self.token = uuid.uuid4().hex
        self._etag: str | None = None
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self.lost = False
        """Set when a renewal found the lease taken by another host (after LEASE_SECONDS without renewal)."""

    def _record(self) -> dict[str, Any]:
        now = time.time()
        return {"host": socket.gethostname(), "stateDir": self.state_dir, "pid": os.getpid(), "token": self.token,
                "renewedAt": now, "expiresAt": now + self.seconds}

    def take(self) -> None:
        """Hold the lease, or raise SyncBusy naming the host and pid that hold it."""
        try:
            self._etag = self.shared.write(LEASE_OBJECT, self._record(), create=True)
        except AlreadyExistsError:
            self._take_over()
        self._thread = threading.Thread(target=self._renew, name="writer-lease", daemon=True)
        self._thread.start()

    def _take_over(self) -> None:
        found = self.shared.read(LEASE_OBJECT)
        if found is None:  # released between our put and our read
            self._etag = self.shared.write(LEASE_OBJECT, self._record(), create=True)
            return
        holder, etag = found
        expires = holder.get("expiresAt")
        ours = holder.get("host") == socket.gethostname() and holder.get("stateDir") == self.state_dir
        # a lease of this host's own state directory was left by a sync that died or lost the endpoint:
        # the caller holds that directory's sync lock, so its holder is gone
        if not ours and isinstance(expires, int | float) and expires > time.time():
            left = expires - time.time()
            raise SyncBusy(f"Another sync is writing {self.shared.where}: host {holder.get('host', '?')} "
                           f"(pid {holder.get('pid', '?')}) holds its writer lease for {left:.0f} s more")
        log.warning("taking over the writer lease of %s: host %s (pid %s) %s", self.shared.where,
                    holder.get("host", "?"), holder.get("pid", "?"), "ended" if ours else "stopped renewing it")
        try:
            self._etag = self.shared.write(LEASE_OBJECT, self._record(), etag=etag)
        except (AlreadyExistsError, PreconditionError):
            raise SyncBusy(f"Another sync took the writer lease of {self.shared.where} at the same moment") from None

    def _renew(self) -> None:
        while not self._stop.wait(self.seconds / 3):
            try:
                self._etag = self.shared.write(LEASE_OBJECT, self._record(), etag=self._etag)
            except (AlreadyExistsError, PreconditionError):
                self.lost = True
                log.error("the writer lease of %s was taken by another host; this sync's commits race it",
                          self.shared.where)
                return
            except ApplianceError as exc:  # the endpoint is away: the sync's own requests fail and say so
                log.warning("cannot renew the writer lease: %s", exc.message)

    def release(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=self.shared.bucket.timeout_s * 3)
        if self.lost:
            return
        try:
            found = self.shared.read(LEASE_OBJECT)
            if found is not None and found[0].get("token") == self.token:
                self.shared.delete(LEASE_OBJECT)
        except ApplianceError as exc:  # it expires by itself
            log.warning("cannot release the writer lease (it expires in %.0f s): %s", self.seconds, exc.message)


def lease_holder(bucket: Bucket) -> dict[str, Any] | None:
    """The unexpired writer lease's {host, pid, renewedAt, expiresAt}, or None."""
    found = SharedObjects(bucket).read(LEASE_OBJECT)
    if found is None:
        return None
    expires = found[0].get("expiresAt")
    return found[0] if isinstance(expires, int | float) and expires > time.time() else None


@contextmanager
def writer_lease(bucket: Bucket, state_dir: str) -> Iterator[WriterLease]:
    """Hold the bucket's writer lease while the block runs (SyncBusy when another host holds it); the
    caller holds the sync lock of `state_dir`."""
    lease = WriterLease(SharedObjects(bucket), state_dir)
    lease.take()
    try:
        yield lease
    finally:
        lease.release()
