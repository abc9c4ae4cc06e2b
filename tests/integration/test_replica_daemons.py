"""Read replicas as users run them: 3 `minirag serve-http` daemons serve one index while a
`minirag sync` subprocess writes into it.

The index starts with the first PRESYNCED files; the daemons start over it, then the writer
syncs the other text files of ../shared/corpus (scripts/bench_ray.py's pick: ~430 chunks,
60–95 s here) and last a PROBE file whose words no other file has; it also rewrites one of the
first files and deletes another, so older versions hold rows the last one does not, and an
answer that mixed two versions would show. One client thread per daemon
asks `GET /api/search` with the bearer token in a loop, every other query the probe's, from
before the sync starts until every daemon has found the probe. Then:

- every answer comes from a committed version: all its hits (source, chunk index, text) are
  rows of one version of the chunks table, read back with LanceDB time travel;
- every daemon sees the final commit without a restart within LAG_S: from the timestamp of the
  version that first holds the probe's rows to the first answer of that daemon that has the
  probe (and every later probe answer has it too);
- the daemons never block the writer (the sync exits 0, nothing failed, within SYNC_BOUND_S)
  nor each other (each answered at least MIN_ANSWERS times while the sync ran, never an
  error, no answer took over MAX_LATENCY_S).

The writer is a plain local sync: readers meet the same commits from `sync --ray`, whose driver
writes through the same `indexing.write_works` (tests/integration/test_ray_replicas.py runs that one),
and a Ray cluster on these 2 cores beside three models would only slow the run.
"""
from __future__ import annotations

import json
import subprocess
import threading
import time
import urllib.parse
from dataclasses import dataclass, field
from pathlib import Path

import lancedb
import pytest

from appliance.storage.tables import CHUNKS
from scripts.bench_ray import _corpus
from tests.fixtures.serve_http import MINIRAG, http, minirag_env, start_serve_http, stop

pytestmark = [pytest.mark.slow, pytest.mark.model, pytest.mark.timeout(900)]

DAEMONS = 3
FILES = 30
PRESYNCED = 3
LAG_S = 15.0
"""The bound on seeing a commit: a daemon's search checks out the latest version first, so one query
and the client's pause; measured 0.16–2.44 s on 2 cores shared by the writer and the three daemons (README)."""
SYNC_BOUND_S = 600.0
"""The sync alone takes ~100 s here (README's figures); six times that would be a writer held up."""
MIN_ANSWERS = 20
MAX_LATENCY_S = 30.0
"""A search here takes ~0.06 s (median) and under 2 s at most while the sync runs; a daemon waiting on the
writer's lock or another daemon would take as long as a commit or the whole sync. (The gap between two
answers is no measure: a process frozen from outside, SIGSTOP, stops the clients and the sync alike.)"""
PAUSE_S = 0.2
TOKEN = "replica-test-token-0123456789abcdef"
QUERIES = ["duck species and their habitat", "a table with merged cells", "invoice total amount due",
           "poems and verses", "code and formulas in a document"]
PROBE = "zz-last/oskarvik-ferry.md"
"""Sorted after every corpus file, so the sync writes it last."""
PROBE_TEXT = ("# Oskarvik harbour ferry timetable\n\nThe Oskarvik ferry to Quillmere leaves pier seven at 07:15 and "
              "16:40 on weekdays.\nTickets for the Quillmere crossing are sold on board; bicycles travel free.\n")
PROBE_QUERY = "Oskarvik Quillmere ferry"

Hit = tuple[str, int, str]


@dataclass
class Answer:
    sent: float
    received: float
    query: str
    hits: list[Hit]
    error: str | None = None


@dataclass
class Client:
    url: str
    answers: list[Answer] = field(default_factory=list)

    def run(self, stop_at: threading.Event) -> None:
        n = 0
        while not stop_at.is_set():
            query = PROBE_QUERY if n % 2 else QUERIES[n // 2 % len(QUERIES)]
            n += 1
            sent = time.time()
            sent = time.time()
            try:
                status, _, body = http(f"{self.url}/api/search?q={urllib.parse.quote(query)}&k=10", token=TOKEN,
                                       timeout=120)
            except OSError as exc:  # refused, reset, timed out: an answer that did not come
                self.answers.append(Answer(sent, time.time(), query, [], f"{type(exc).__name__}: {exc}"))
                stop_at.wait(1)
                continue
            if status != 200:
                self.answers.append(Answer(sent, time.time(), query, [], f"HTTP {status}: {body[:300]!r}"))
            else:
                hits = [(h["source"], h["chunkIndex"], h["text"]) for h in json.loads(body)["results"]]
                self.answers.append(Answer(sent, time.time(), query, hits))
            stop_at.wait(PAUSE_S)

    def probe_seen(self) -> float | None:
        """When this daemon's answer first had the probe."""
        return next((a.received for a in self.answers if has_probe(a.hits)), None)


def has_probe(hits: list[Hit] | frozenset[Hit]) -> bool:
    return any(h[0].endswith("/" + PROBE) for h in hits)


def _versions(index: Path) -> list[tuple[int, float, frozenset[Hit]]]:
    """Every version of the chunks table: (version, commit time, its rows as (source, chunk index, text))."""
    table = lancedb.connect(str(index)).open_table(CHUNKS)
    out = []
    for v in table.list_versions():
        table.checkout(v["version"])
        rows = table.search().select(["source_id", "chunk_index", "text"]).limit(None).to_list()
        # list_versions gives naive local datetimes (datetime.fromtimestamp): .timestamp() reads them back
        out.append((v["version"], v["timestamp"].timestamp(),
                    frozenset((r["source_id"], r["chunk_index"], r["text"]) for r in rows)))
    return out


def test_three_serve_http_daemons_answer_from_committed_versions_while_a_sync_writes(
        models_dir: Path, tmp_path: Path) -> None:
    docs, index = tmp_path / "docs", tmp_path / "index"
    env = minirag_env(docs, index, MCP_AUTH_TOKEN=TOKEN, MODELS_DIR=str(models_dir))
    staged = tmp_path / "staged"
    _corpus(FILES, staged)
    rel = sorted(str(p.relative_to(staged)) for p in staged.rglob("*") if p.is_file())
    assert len(rel) == FILES

    def publish(names: list[str]) -> None:
        for name in names:
            (docs / name).parent.mkdir(parents=True, exist_ok=True)
            (staged / name).rename(docs / name)

    publish(rel[:PRESYNCED])
    first = subprocess.run([*MINIRAG, "sync", "--json"], env=env, capture_output=True, text=True, timeout=600)
    assert first.returncode == 0 and json.loads(first.stdout)["added"] == PRESYNCED, first.stderr[-2000:]

    daemons: list[subprocess.Popen[bytes]] = []
    clients: list[Client] = []
    threads: list[threading.Thread] = []
    stop_at = threading.Event()
    writer: subprocess.Popen[str] | None = None
    try:
        for n in range(DAEMONS):
            proc, url = start_serve_http(env, tmp_path / f"daemon-{n}.log")
            daemons.append(proc)
            clients.append(Client(url))
        for client in clients:
            threads.append(threading.Thread(target=client.run, args=(stop_at,), daemon=True))
            threads[-1].start()
        deadline = time.monotonic() + 300
        while not all(any(a.hits for a in c.answers) for c in clients):  # every daemon has its model loaded
            assert time.monotonic() < deadline, "a daemon gave no answer within 300 s"
            time.sleep(0.5)

        publish(rel[PRESYNCED:])
        rewritten, deleted = docs / rel[0], docs / rel[1]
        rewritten.write_text(rewritten.read_text().upper())  # every chunk's text changes
        deleted.unlink()
        (docs / PROBE).parent.mkdir(parents=True, exist_ok=True)
        (docs / PROBE).write_text(PROBE_TEXT)
        sync_started = time.time()
        with open(tmp_path / "sync.log", "w") as log:
            # --here: the writer is a process of its own (a daemon would otherwise run the sync handed to it)
            writer = subprocess.Popen([*MINIRAG, "sync", "--here", "--json"], env=env, stdout=subprocess.PIPE,
                                      stderr=log, text=True)
        out, _ = writer.communicate(timeout=SYNC_BOUND_S)
        sync_ended = time.time()
        deadline = time.monotonic() + LAG_S
        while not all(c.probe_seen() for c in clients) and time.monotonic() < deadline:
            time.sleep(0.2)
        time.sleep(1)  # a few more probe answers after the first, to check they keep it
    finally:
        stop_at.set()
        for thread in threads:
            thread.join(150)
        if writer is not None:
            stop(writer)
        for proc in daemons:
            stop(proc)

    sync_log = (tmp_path / "sync.log").read_text()[-2000:]
    assert writer.returncode == 0, sync_log
    report = json.loads(out)
    assert (report["added"], report["updated"], report["deleted"], report["failedCount"]) == \
        (FILES - PRESYNCED + 1, 1, 1, 0), sync_log
    sync_s = sync_ended - sync_started

    versions = _versions(index)
    probe_versions = [(v, t) for v, t, rows in versions if has_probe(rows)]
    assert probe_versions, "no version holds the probe"
    probe_version, committed_at = probe_versions[0]

    final = versions[-1][2]
    texts = [{(source, index): text for source, index, text in rows} for _v, _t, rows in versions]

    def holds(chunks: dict[tuple[str, int], str], hits: frozenset[Hit]) -> bool:
        """Every hit is a chunk of that version; the page shows a passage without its heading line,
        so a hit's text lies inside the chunk's text."""
        return all((source, index) in chunks and text in chunks[(source, index)] for source, index, text in hits)

    lags, during, slowest, stale, stale_in_sync = [], [], [], 0, 0
    for n, client in enumerate(clients):
        log = (tmp_path / f"daemon-{n}.log").read_text()[-2000:]
        errors = [a.error for a in client.answers if a.error]
        assert not errors, (n, errors[:3], log)
        for answer in client.answers:
            hits = frozenset(answer.hits)
            stale += not holds(texts[-1], hits)
            stale_in_sync += not holds(texts[-1], hits) and answer.received >= sync_started
            assert any(holds(chunks, hits) for chunks in texts), (n, answer.query, answer.received - sync_started,
                                                                   sorted(hits - final)[:3])
        in_sync = [a.received - a.sent for a in client.answers if sync_started <= a.received <= sync_ended]
        during.append(len(in_sync))
        assert len(in_sync) >= MIN_ANSWERS, (n, len(in_sync))
        slowest.append(max(in_sync))
        assert slowest[-1] <= MAX_LATENCY_S, (n, slowest[-1])
        seen = client.probe_seen()
        assert seen is not None, f"daemon {n} never found the probe within {LAG_S} s of the sync's end"
        lags.append(seen - committed_at)
        assert lags[-1] <= LAG_S, (n, lags[-1])
        later = [a for a in client.answers if a.query == PROBE_QUERY and a.received > seen]
        assert later and all(has_probe(a.hits) for a in later), f"daemon {n} lost the probe"

    assert stale, "no answer held a row the last version lost: the rewrite and the delete went unseen"
    answered = sum(len(c.answers) for c in clients)
    commits = sum(sync_started <= t <= sync_ended for _v, t, _r in versions)
    print(f"\n{DAEMONS} serve-http daemons, {answered} answers ({', '.join(map(str, during))} during the sync, "
          f"the slowest {', '.join(f'{s:.2f}' for s in slowest)} s), "
          f"each from one of the {len(versions)} committed versions ({commits} committed during the sync; "
          f"{stale} answers, {stale_in_sync} during the sync, hold rows the last version no longer has); "
          f"sync {sync_s:.1f} s "
          f"({report['added']} files); the probe committed at version {probe_version}, "
          f"{sync_ended - committed_at:.2f} s before the sync exited; seen by the daemons after "
          f"{', '.join(f'{lag:.2f}' for lag in lags)} s")
