"""The status and search page of `minirag serve-http` (appliance/adapters/status_page.py), in a real browser.

A real `minirag serve-http 127.0.0.1:PORT` with a token serves a small folder that the CLI
synced first (one file fails to convert; one is named like an HTML injection). Its JSON
endpoints are checked over plain HTTP; then Debian's chromium, driven headless by selenium
through chromedriver, signs in with a wrong token and the right one, reads the status panel
(index counts, the last sync and its failure by name, the scheduler's next run, a running
sync's progress as it moves), searches, opens a document, and shows the hostile file name
as text without running it.

Needs `apt-get install chromium chromium-driver` (.ci/run installs them): skipped with that
reason where they are missing, failed in CI.
"""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import time
import urllib.parse
from collections.abc import Callable, Iterator
from functools import partial
from typing import Any

import pytest

from appliance.storage.locking import sync_lock
from appliance.sync.state import SCHEDULER_FILE, SyncProgress, hold_alive_lock, write_json
from tests.fixtures import serve_http
from tests.fixtures.serve_http import MINIRAG, minirag_env, start_serve_http, stop

pytestmark = [pytest.mark.slow, pytest.mark.model, pytest.mark.timeout(900)]

TOKEN = "page-test-token-0123456789abcdef"
HOSTILE = "<img src=x onerror=alert(1)>.md"
CHROMIUM, CHROMEDRIVER = "/usr/bin/chromium", "/usr/bin/chromedriver"
DOCS = {
    "manual/flux.md": "# Flux capacitor manual\n\n## Power\n\nThe flux capacitor needs 1.21 gigawatts to start.\n"
                      "Never connect it to the kitchen socket.\n",
    "notes/vacation.md": "# Vacation policy\n\nEmployees receive twenty-eight days of paid vacation per year.\n",
    HOSTILE: "# Zebra notes\n\nZebra stripes confuse biting flies; each animal has its own pattern.\n",
    "broken.docx": b"this is not a zip archive",
}


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Any]]:
    """A synced folder and `minirag serve-http` over it with TOKEN: {url, docs, db, env}."""
    base = tmp_path_factory.mktemp("page")
    docs, db = base / "docs", base / "index"
    for rel, content in DOCS.items():
        path = docs / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        (path.write_bytes if isinstance(content, bytes) else path.write_text)(content)
    env = minirag_env(docs, db, MCP_AUTH_TOKEN=TOKEN)
    done = subprocess.run([*MINIRAG, "sync", "--json"], env=env, capture_output=True, text=True, timeout=600)
    report = json.loads(done.stdout)
    assert (report["added"], report["failedCount"]) == (3, 1), done.stderr[-2000:]
    proc, url = start_serve_http(env, base / "server.log")
    try:
        yield {"url": url, "docs": docs, "db": db, "log": base / "server.log"}
    finally:
        stop(proc)


http = partial(serve_http.http, token=TOKEN)
"""(status, headers, body) of one request with TOKEN unless told otherwise; no redirects followed."""


def api_error(url: str, **kwargs: Any) -> tuple[int, dict[str, Any]]:
    status, _, body = http(url, **kwargs)
    return status, json.loads(body)["error"]


def test_endpoints_need_the_token_and_name_bad_input(served: dict[str, Any]) -> None:
    url, docs = served["url"], served["docs"]
    status, headers, body = http(f"{url}/", token=None)
    assert status == 401 and b'id="login-form"' in body
    csp = headers["content-security-policy"]
    assert "default-src 'none'" in csp and "script-src 'self'" in csp and "http" not in csp
    for token in (None, "wrong-token-wrong-token", TOKEN + "x"):
        status, error = api_error(f"{url}/api/status", token=token)
        assert (status, error["code"]) == (401, "unauthorized") and error["hint"]
    status, headers, _ = http(f"{url}/static/page.js", token=None)  # no data in it: open, like the sign-in form
    assert status == 200 and headers["content-type"].startswith("text/javascript")
    assert http(f"{url}/static/nothing.js", token=None)[0] == 404

    status, _, body = http(f"{url}/api/status")
    data = json.loads(body)
    assert status == 200 and data["index"]["sourceCount"] == 3 and data["lastSync"]["failedCount"] == 1
    assert data["signInRequired"] is True

    q = urllib.parse.quote
    for path, code in [("/api/search?q=", "invalid_argument"), ("/api/search?q=%20%20", "invalid_argument"),
                       ("/api/search?q=flux&k=1000", "invalid_argument"),
                       ("/api/search?q=flux&k=ten", "invalid_argument"),
                       ("/api/search?q=flux&k=0", "invalid_argument"),
                       ("/api/search?q=" + "x" * 4001, "invalid_argument"),
                       ("/api/read?path=/etc/passwd", "path_outside_roots"),
                       (f"/api/read?path={q(str(docs / '..' / '..'))}", "path_outside_roots"),
                       ("/api/read?path=manual/flux.md", "invalid_argument"),
                       ("/api/read", "invalid_argument"),
                       (f"/api/read?path={q(str(docs / 'manual/flux.md'))}&source=x", "invalid_argument"),
                       (f"/api/read?path={q(str(docs / 'manual/flux.md'))}&offset=-1", "invalid_argument"),
                       (f"/api/read?path={q(str(docs / 'nothing.md'))}", "not_found"),
                       ("/api/nothing", "not_found")]:
        status, error = api_error(url + path)
        assert error["code"] == code, (path, error)
        assert status == {"invalid_argument": 400, "path_outside_roots": 400, "not_found": 404}[code], path
        assert error["message"] and "Traceback" not in error["message"]

    status, _, body = http(f"{url}/api/search?q={q('flux capacitor gigawatts')}&k=3")
    hits = json.loads(body)["results"]
    assert status == 200 and hits[0]["citation"] == "manual/flux.md:1" and "parents" not in json.loads(body)
    status, _, body = http(f"{url}/api/read?path={q(hits[0]['filePath'])}")
    assert status == 200 and "1.21 gigawatts" in json.loads(body)["content"]


def test_sign_in_opens_the_page_not_mcp(served: dict[str, Any]) -> None:
    url = served["url"]
    form = {"Content-Type": "application/x-www-form-urlencoded"}
    status, _, body = http(f"{url}/login", token=None, data=b"token=wrong", headers=form)
    assert status == 401 and b'id="login-error"' in body and b"unauthorized" in body
    status, headers, _ = http(f"{url}/login", token=None, data=f"token={TOKEN}".encode(), headers=form)
    assert status == 303 and headers["location"] == "/"
    cookie = headers["set-cookie"]
    assert "HttpOnly" in cookie and "SameSite=strict" in cookie and TOKEN not in cookie
    jar = {"Cookie": cookie.split(";")[0]}
    assert http(f"{url}/api/status", token=None, headers=jar)[0] == 200
    assert http(f"{url}/", token=None, headers=jar)[0] == 200
    mcp_call = json.dumps({"jsonrpc": "2.0", "id": 1, "method": "tools/list"}).encode()
    mcp_headers = {"Content-Type": "application/json", "Accept": "application/json, text/event-stream"}
    assert http(f"{url}/mcp", token=None, data=mcp_call, headers=jar | mcp_headers)[0] == 401  # MCP: bearer only
    initialize = json.dumps({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
        "protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "page-test", "version": "1"}}})
    status, _, body = http(f"{url}/mcp", data=initialize.encode(), headers=mcp_headers)
    assert status == 200 and b'"serverInfo"' in body, body[:500]
    assert http(f"{url}/logout", token=None, data=b"", headers=jar)[0] == 303
    assert http(f"{url}/api/status", token=None, headers=jar)[0] == 401  # signed out
    status, _, _ = http(f"{url}/login", token=None, data=b"token=" + b"x" * 20000, headers=form)
    assert status == 413


# ---- the browser --------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    missing = [p for p in (CHROMIUM, CHROMEDRIVER) if not shutil.which(p)]
    if missing:
        reason = f"{' and '.join(missing)} missing: apt-get install -y chromium chromium-driver"
        if os.environ.get("CI"):
            pytest.fail(reason)
        pytest.skip(reason)
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    for arg in ("--headless=new", "--no-sandbox", "--disable-dev-shm-usage", "--disable-gpu",
                "--no-first-run", "--disable-extensions", "--window-size=1280,1600"):
        options.add_argument(arg)
    driver = webdriver.Chrome(options=options, service=Service(CHROMEDRIVER))
    driver.set_page_load_timeout(120)
    try:
        yield driver
    finally:
        driver.quit()


def wait_for(driver: Any, what: Callable[[Any], Any], timeout: float = 60, message: str = "") -> Any:
    """`what(driver)` once it is truthy; on a timeout, the failure shows the page's text."""
    from selenium.common.exceptions import TimeoutException
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import WebDriverWait

    try:
        return WebDriverWait(driver, timeout, poll_frequency=0.2).until(what)
    except TimeoutException:
        pytest.fail(f"{message or 'timed out'} after {timeout:.0f} s; the page shows:\n"
                    + driver.find_element(By.TAG_NAME, "body").text[:3000])


def text_of(element_id: str, contains: str) -> Callable[[Any], bool]:
    from selenium.webdriver.common.by import By

    def check(driver: Any) -> bool:
        found = driver.find_elements(By.ID, element_id)
        return bool(found) and contains in found[0].text
    return check


def test_page_in_a_real_browser(served: dict[str, Any], browser: Any) -> None:
    from selenium.common.exceptions import NoAlertPresentException
    from selenium.webdriver.common.by import By

    url, db, docs = served["url"], served["db"], served["docs"]
    driver = browser
    started = time.monotonic()

    # Sign in: a wrong token is named on the form, the right one opens the page.
    driver.get(f"{url}/")
    driver.find_element(By.ID, "token").send_keys("not-the-token-at-all")
    driver.find_element(By.ID, "login-button").click()
    wait_for(driver, text_of("login-error", "wrong token"), message="no error for a wrong token")
    driver.find_element(By.ID, "token").send_keys(TOKEN)
    driver.find_element(By.ID, "login-button").click()

    # The status panel: index counts, the last sync and its failure by name, the scheduler.
    wait_for(driver, text_of("index-sources", "3"), message="index counts not shown")
    assert driver.find_element(By.ID, "index-chunks").text.isdigit()
    wait_for(driver, text_of("last-sync-summary", "3 added"))
    assert "broken.docx" in driver.find_element(By.ID, "last-sync").text
    assert "No scheduler" in driver.find_element(By.ID, "scheduler").text
    assert not driver.find_element(By.ID, "logout-form").get_attribute("hidden")

    # A scheduler and a running sync appear (as their state files tell every process), and the
    # sync's progress moves while the page polls.
    alive = hold_alive_lock(db)
    try:
        write_json(db, SCHEDULER_FILE, {"state": "idle", "pid": os.getpid(), "aliveLock": True,
                                        "intervalSeconds": 900, "nextRunAt": time.time() + 600,
                                        "lastRunFinishedAt": time.time() - 300, "lastResult": "partial"})
        with sync_lock(db):
            progress = SyncProgress(db, "scheduler")

            def publish(done: int, path: str, chunks: int) -> None:
                time.sleep(0.6)  # SyncProgress publishes at most every 0.5 s
                progress.indexing(done, 10, str(docs / path), chunks)

            publish(3, "manual/flux.md", 7)  # no reload: the page polls the sync every 2.5 s, idle or not
            wait_for(driver, text_of("sync-running", "3 / 10 files"), timeout=8, message="running sync not shown")
            assert "started by scheduler" in driver.find_element(By.ID, "sync-running").text
            wait_for(driver, text_of("scheduler-next", "(in 10 min)"))
            assert "partial" in driver.find_element(By.ID, "scheduler").text
            publish(6, "notes/vacation.md", 12)
            wait_for(driver, text_of("sync-running", "6 / 10 files"), timeout=30, message="progress did not move")
            progress.close()
        wait_for(driver, text_of("sync-running", "No sync is running"), timeout=30)
    finally:
        os.close(alive) if alive is not None else None
        (db / SCHEDULER_FILE).unlink(missing_ok=True)

    # Search: hits with their citations; a hit opens its document.
    def search(query: str, citation: str) -> Any:
        box = driver.find_element(By.ID, "search-q")
        box.clear()
        box.send_keys(query)
        driver.find_element(By.ID, "search-button").click()
        return wait_for(driver, lambda d: next((h for h in d.find_elements(By.CSS_SELECTOR, "#hits .hit")
                                                if h.find_element(By.CLASS_NAME, "citation").text == citation), None),
                        timeout=120, message=f"no hit cited {citation}")

    hit = search("how many gigawatts does the flux capacitor need", "manual/flux.md:1")
    hit.find_element(By.CLASS_NAME, "open").click()
    wait_for(driver, text_of("reader-content", "needs 1.21 gigawatts to start"), message="document not shown")
    assert driver.find_element(By.ID, "reader-title").text == "Flux capacitor manual"

    # A named error in the page, not a traceback.
    driver.find_element(By.ID, "search-q").clear()
    driver.execute_script("document.getElementById('search-q').removeAttribute('required')")
    driver.find_element(By.ID, "search-button").click()
    wait_for(driver, text_of("search-error", "invalid_argument: The query is empty"))

    # A file named like markup is shown as text: no element made of it, no script run.
    hit = search("zebra stripes biting flies", f"{HOSTILE}:1")
    hit.find_element(By.CLASS_NAME, "open").click()
    wait_for(driver, text_of("reader-content", "Zebra stripes confuse biting flies"))
    assert HOSTILE in driver.find_element(By.ID, "reader-meta").text
    assert driver.find_elements(By.TAG_NAME, "img") == []
    with pytest.raises(NoAlertPresentException):
        driver.switch_to.alert.text  # noqa: B018

    # Sign out with the page's own form: the browser sends this server as its Origin (host_guard lets it by).
    driver.find_element(By.CSS_SELECTOR, "#logout-form button").click()
    wait_for(driver, lambda d: d.find_elements(By.ID, "login-form"), message="sign-out did not end the session")
    print(f"browser part: {time.monotonic() - started:.1f} s")
