"""ConvertPool against hostile files: one named error each, the pool keeps working, memory bounded."""
from __future__ import annotations

import os
import signal
import threading
import time
import zipfile
from pathlib import Path

import pytest

from appliance.chunks import Converted
from appliance.errors import ApplianceError, ConversionFailed, FileTooLarge, UnsupportedFile
from appliance.ingest.failures import (
    BinaryContent,
    ConversionMemoryLimit,
    ConversionTimeout,
    ImageTooLarge,
    MislabelledFile,
    WorkerCrashed,
)
from appliance.ingest.isolate import ConvertPool
from appliance.ingest.ocr import OcrConfig
from appliance.platform import native_memory

MB = 1 << 20
MEMORY = 900 * MB  # address space per worker: ~480 MB is mapped by the imports alone


class PeakRss:
    """Samples the workers' resident memory (VmRSS) every 50 ms and keeps the maximum."""

    def __init__(self, pool: ConvertPool) -> None:
        self.pool, self.peak_kb, self._stop = pool, 0, threading.Event()
        self._t = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while not self._stop.is_set():
            for pid in self.pool.worker_pids():
                for kid in [pid, *_children(pid)]:
                    self.peak_kb = max(self.peak_kb, _rss_kb(kid))
            time.sleep(0.05)

    def __enter__(self) -> PeakRss:
        self._t.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._t.join()


def _rss_kb(pid: int) -> int:
    try:
        with open(f"/proc/{pid}/status") as status:
            for line in status:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1])
    except OSError:
        pass
    return 0


def _children(pid: int) -> list[int]:
    try:
        return [int(x) for x in open(f"/proc/{pid}/task/{pid}/children").read().split()]
    except OSError:
        return []


@pytest.fixture(scope="module")  # slow to write (a 1.2 GB zip bomb to deflate): its tests are `slow`
def hostile(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from PIL import Image

    d = tmp_path_factory.mktemp("hostile")
    with zipfile.ZipFile(d / "bomb.docx", "w", zipfile.ZIP_DEFLATED) as z:
        z.writestr("[Content_Types].xml", "<Types/>")
        z.writestr("word/document.xml", b"\0" * (1200 * MB))
    (d / "binary.md").write_bytes(os.urandom(2048) + b"\0" * 64)
    (d / "report.pdf").write_text("<!DOCTYPE html><html><body><h1>Not found</h1></body></html>")
    (d / "memo.docx").write_text("I am not a zip file")
    (d / "~$memo.docx").write_bytes(b"\x05owner" + b"\0" * 156)
    (d / ".secret.md").write_text("# hidden\n")
    Image.new("1", (12000, 12000)).save(d / "poster.png")  # 144 MP, 18 KB on disk
    (d / "huge.txt").write_bytes(b"a" * (41 * MB))  # over the pool's MAX_FILE_SIZE
    (d / "deep.html").write_text("<html><body>" + "<div><span>x" * 200_000 + "</body></html>")
    with open(d / "wide.csv", "w") as f:  # ~35 MB that takes ~700 MB RSS (+~500 MB mapped) as a table
        for i in range(280_000):
            f.write(f"{i}," + "abc def ghi," * 10 + "\n")
    for i in range(3):
        (d / f"good{i}.md").write_text(f"# Good {i}\n\nплавающие строки {i}\n")  # decoded in this process
        (d / f"good{i}.html").write_text(f"<html><body><h1>Good {i}</h1><p>плавающие строки {i}</p></body></html>",
                                         "utf-8")  # parsed in a worker
    return d


EXPECT: dict[str, type[ApplianceError] | tuple[type[ApplianceError], ...]] = {
    "bomb.docx": ConversionFailed,
    "binary.md": BinaryContent,
    "report.pdf": MislabelledFile,
    "memo.docx": MislabelledFile,
    "~$memo.docx": UnsupportedFile,
    ".secret.md": UnsupportedFile,
    "poster.png": ImageTooLarge,
    "huge.txt": FileTooLarge,
    # MemoryError inside Python is reported as such; a C parser that dies on a failed malloc is a
    # crash whose message still points at the memory limit.
    "wide.csv": (ConversionMemoryLimit, WorkerCrashed),
}


@pytest.mark.slow
def test_hostile_folder_one_named_error_each(hostile: Path) -> None:
    names = ["good0.md", "good0.html", *EXPECT, "good1.md", "good2.html"]
    with ConvertPool(workers=2, timeout_s=180, memory_bytes=MEMORY, ocr=OcrConfig(), max_file_size=40 * MB) as pool:
        with PeakRss(pool) as peak:
            results = list(pool.imap(hostile / n for n in names))
        # the pool still works after all of it
        assert pool.convert(hostile / "good0.html").title == "Good 0"
    assert [p.name for p, _ in results] == names  # input order
    for path, res in results:
        if path.name.startswith("good"):
            assert isinstance(res, Converted) and "плавающие строки" in res.markdown, res
            continue
        assert isinstance(res, EXPECT[path.name]), (path.name, res)
        assert path.name in str(res), res  # every error names its file
        assert res.code and res.message
    assert "zip bomb" in str(dict(results)[hostile / "bomb.docx"])
    assert "memory limit" in str(dict(results)[hostile / "wide.csv"])
    print(f"peak worker RSS {peak.peak_kb / 1024:.0f} MB")
    assert peak.peak_kb * 1024 < MEMORY


@pytest.mark.slow
def test_timeout_kills_and_replaces_the_worker(hostile: Path) -> None:
    with ConvertPool(workers=1, timeout_s=1.5, memory_bytes=MEMORY, ocr=None, max_file_size=50 * MB) as pool:
        pool.convert(hostile / "good0.html")  # the worker starts with the first file that needs a parser
        before = pool.worker_pids()
        with pytest.raises(ConversionTimeout, match=r"deep\.html.*timed out after 1\.5 s"):
            pool.convert(hostile / "deep.html")
        assert pool.restarts == 1
        assert pool.convert(hostile / "good1.html").markdown.startswith("# Good 1")
        assert pool.worker_pids() != before
        assert not Path(f"/proc/{before[0]}").exists() or "Z" in Path(f"/proc/{before[0]}/stat").read_text().split()[2]


@pytest.mark.slow
def test_crashed_worker_is_named_and_replaced(hostile: Path) -> None:
    with ConvertPool(workers=1, timeout_s=120, memory_bytes=MEMORY, ocr=None, max_file_size=50 * MB) as pool:
        pool.convert(hostile / "good2.html")  # worker is up and warm
        [pid] = pool.worker_pids()
        threading.Timer(1.0, os.kill, args=(pid, signal.SIGSEGV)).start()
        with pytest.raises(WorkerCrashed, match=r"deep\.html.*SIGSEGV"):
            pool.convert(hostile / "deep.html")
        assert pool.convert(hostile / "good2.html").title == "Good 2"


@pytest.mark.slow
@pytest.mark.parametrize("allocator", ["glibc", "jemalloc"])
def test_a_parse_held_at_the_memory_limit_is_stopped_as_over_it(allocator: str,
                                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    """A 16 MB HTML table's DOM needs more than the limit. Its parse either ends in a MemoryError within
    seconds or, about two runs in three, limps along at the limit for minutes (each allocation a failed
    system call): both must end promptly as the memory limit, not as CONVERT_TIMEOUT much later. A parse that
    fits leaves its worker holding most of the limit's address space: that worker is replaced. On jemalloc too,
    which the image preloads: there the worker could not even build its error, and its exit says it instead."""
    from scripts.faults_untrusted import hostile_html

    library = native_memory.jemalloc_library()
    if allocator == "jemalloc":
        if library is None:
            pytest.skip("jemalloc is not installed (apt-get install libjemalloc2)")
        monkeypatch.setenv("LD_PRELOAD", library)  # the workers the pool spawns preload it
    else:
        monkeypatch.delenv("LD_PRELOAD", raising=False)
    table = hostile_html(16).decode()
    with ConvertPool(workers=1, timeout_s=300, memory_bytes=MEMORY, ocr=None, max_file_size=64 * MB) as pool:
        pool.convert_data("<h1>Warm</h1>", "html", title=None, label="warm")
        [pid] = pool.worker_pids()
        assert ("libjemalloc" in Path(f"/proc/{pid}/maps").read_text()) == (allocator == "jemalloc")
        for _ in range(3):
            t0 = time.monotonic()
            with pytest.raises(ConversionMemoryLimit, match=r"table\.html.*memory limit of 900 MB"):
                pool.convert_data(table, "html", title=None, label="table.html")
            assert time.monotonic() - t0 < 60
        assert pool.convert_data("<h1>Good</h1><p>text</p>", "html", title=None, label="good").title == "Good"
        assert pool.restarts == 3
        # a table that fits converts, and its worker, which keeps most of the limit mapped, is replaced after it
        [before] = pool.worker_pids()
        assert "cell 7 lantern" in pool.convert_data(hostile_html(7).decode(), "html", title=None, label="7").markdown
        assert pool.worker_pids() != [before] and pool.restarts == 3


@pytest.mark.slow
def test_concurrent_callers_share_the_pool(hostile: Path) -> None:
    with ConvertPool(workers=2, timeout_s=60, memory_bytes=MEMORY, ocr=None, max_file_size=MB) as pool:
        out: list[object] = []
        threads = [
            threading.Thread(target=lambda n=n: out.append(
                pool.convert(hostile / f"good{n % 3}.{'html' if n < 3 else 'md'}").title))
            for n in range(6)
        ]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    assert sorted(out) == sorted(f"Good {n % 3}" for n in range(6))  # type: ignore[type-var]


def test_plain_text_is_decoded_here_and_starts_no_worker(tmp_path: Path) -> None:
    for name, text in (("a.md", "---\ntags: [x, y]\n---\n# Alpha\n\nтекст\n"), ("b.txt", "Beta\n"),
                       ("c.json", '{"k": "v"}\n')):
        (tmp_path / name).write_text(text, "utf-8")
    (tmp_path / "d.md").write_bytes(os.urandom(2048) + b"\0" * 64)
    with ConvertPool(workers=1, timeout_s=10, memory_bytes=MEMORY, ocr=None, max_file_size=MB) as pool:
        results = dict(pool.imap(tmp_path / n for n in ("a.md", "b.txt", "c.json", "d.md")))
        assert pool.worker_pids() == []
    a = results[tmp_path / "a.md"]
    assert isinstance(a, Converted) and a.title == "Alpha" and a.metadata["tags"] == "x,y" and a.has_lines
    assert isinstance(results[tmp_path / "b.txt"], Converted) and isinstance(results[tmp_path / "c.json"], Converted)
    assert isinstance(results[tmp_path / "d.md"], BinaryContent) and "d.md" in str(results[tmp_path / "d.md"])


def test_closed_pool_refuses_work(tmp_path: Path) -> None:
    (tmp_path / "good0.md").write_text("# Good 0\n")  # not the hostile folder: nothing here is converted
    pool = ConvertPool(workers=1, timeout_s=10, memory_bytes=MEMORY, ocr=None, max_file_size=MB)
    pids = pool.worker_pids()
    pool.close()
    with pytest.raises(RuntimeError):
        pool.convert(tmp_path / "good0.md")
    time.sleep(0.2)
    for pid in pids:
        assert not Path(f"/proc/{pid}").exists() or "Z" in Path(f"/proc/{pid}/stat").read_text().split()[2]


def test_worker_imports_stay_small() -> None:
    """What a worker imports (the ingest modules and markitdown) pulls in no fastembed or lancedb."""
    import subprocess
    import sys

    code = (
        "import sys, appliance.ingest.isolate, appliance.ingest.convert, markitdown.converters;"
        "bad = sorted(m for m in sys.modules if m.split('.')[0] in ('fastembed', 'lancedb', 'tokenizers'));"
        "print(bad); sys.exit(1 if bad else 0)"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_workers_that_cannot_start_fail_each_file_by_name_and_the_next_start_succeeds(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A pool whose worker processes cannot be started (a daemonic parent may not start any) fails the files
    that needed one, each by name, instead of leaving them queued for a worker that never comes; once
    starting works again, the pool starts its workers."""
    import appliance.ingest.isolate as isolate

    pages = []
    for i in range(5):
        pages.append(tmp_path / f"page{i}.html")
        pages[-1].write_text(f"<p>page {i} about valves</p>")
    real = isolate._Worker
    refused = {"n": 0}

    def cannot_start(*args: object, **kwargs: object) -> object:
        refused["n"] += 1
        raise AssertionError("daemonic processes are not allowed to have children")

    monkeypatch.setattr(isolate, "_Worker", cannot_start)
    pool = ConvertPool(workers=2, timeout_s=60, memory_bytes=MEMORY, ocr=None, max_file_size=10 * MB)
    try:
        outcome: list[tuple[Path, object]] = []
        thread = threading.Thread(target=lambda: outcome.extend(pool.imap(pages)), daemon=True)
        thread.start()
        thread.join(60)
        assert not thread.is_alive(), "the files waited for a worker that never started"
        assert [p for p, _ in outcome] == pages
        assert all(isinstance(r, ApplianceError) and p.name in str(r) and "daemonic" in str(r)
                   for p, r in outcome), outcome
        assert refused["n"] >= 1
        monkeypatch.setattr(isolate, "_Worker", real)
        converted = pool.convert(pages[0])
        assert "valves" in converted.markdown
    finally:
        pool.close()
