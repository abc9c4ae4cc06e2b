// The minirag status and search page (appliance/status_page.py serves it and its JSON).
// Everything that comes from the server (file names, document text, error messages) goes
// into the page as text (textContent, createElement): never as HTML. Names (paths, source
// ids, titles, headings) and messages go through label() too: one line, nothing hidden.
"use strict";

(function () {
  var POLL_SYNC_MS = 2500;     // the sync part (/api/sync, small state files): a sync shows within this
  var POLL_FULL_MS = 15000;    // the whole status (index counts) when no sync runs
  var REQUEST_TIMEOUT_MS = 150000;
  var MAX_ROWS = 200;          // failures listed per sync; the rest are counted
  var pollTimer = null;
  var reader = { query: null, revision: null, nextOffset: null };

  function $(id) { return document.getElementById(id); }

  function el(tag, text, cls) {
    var node = document.createElement(tag);
    if (text !== undefined && text !== null) node.textContent = String(text);
    if (cls) node.className = cls;
    return node;
  }

  // A name as one visible line: control, line-break and bidi characters shown as escapes (a tab is kept).
  // The rule of appliance/quoting.py's label, which the server's other renderers use.
  var HIDDEN = /[\p{Cc}\p{Zl}\p{Zp}\p{Cs}\u061c\u200e\u200f\u202a-\u202e\u2066-\u2069]/gu;
  function label(text) {
    if (text === null || text === undefined) return text;
    return String(text).replace(HIDDEN, function (ch) {
      if (ch === "\t") return ch;
      if (ch === "\n") return "\\n";
      if (ch === "\r") return "\\r";
      var code = ch.codePointAt(0);
      var hex = code.toString(16);
      return code < 0x100 ? "\\x" + ("0" + hex).slice(-2) : "\\u" + ("000" + hex).slice(-4);
    });
  }

  function clear(node) { while (node.firstChild) node.removeChild(node.firstChild); }

  function fmtTime(seconds, now) {
    if (seconds === null || seconds === undefined) return "never";
    var when = new Date(seconds * 1000).toLocaleString();
    if (now === undefined) return when;
    var delta = Math.round(seconds - now);
    var ago = Math.abs(delta);
    var span = ago < 90 ? ago + " s" : ago < 5400 ? Math.round(ago / 60) + " min" : (ago / 3600).toFixed(1) + " h";
    return when + (delta >= 0 ? " (in " + span + ")" : " (" + span + " ago)");
  }

  function fmtDuration(seconds) {
    if (seconds === null || seconds === undefined) return "unknown";
    seconds = Math.round(seconds);
    return seconds >= 60 ? Math.floor(seconds / 60) + " min " + (seconds % 60) + " s" : seconds + " s";
  }

  function num(n) { return n === null || n === undefined ? "?" : Number(n).toLocaleString(); }

  // One named error as text: "code: message (hint)".
  function showError(node, error) {
    if (!error) { node.hidden = true; node.textContent = ""; return; }
    node.textContent = label((error.code || "error") + ": " + (error.message || "") + (error.hint ? " (" + error.hint + ")" : ""));
    node.hidden = false;
  }

  // GET a JSON endpoint: resolves to {ok, data} or {ok: false, error}; a lost session goes to sign-in.
  function getJSON(url) {
    var controller = new AbortController();
    var timer = setTimeout(function () { controller.abort(); }, REQUEST_TIMEOUT_MS);
    return fetch(url, { credentials: "same-origin", signal: controller.signal, headers: { Accept: "application/json" } })
      .then(function (response) {
        if (response.status === 401) { window.location.assign("/"); }
        return response.json().then(function (data) {
          if (!response.ok || data.error) {
            return { ok: false, error: data.error || { code: "http_" + response.status, message: response.statusText } };
          }
          return { ok: true, data: data };
        }, function () {
          return { ok: false, error: { code: "http_" + response.status, message: "The server's answer was not JSON" } };
        });
      }, function (err) {
        var aborted = err && err.name === "AbortError";
        return { ok: false, error: { code: aborted ? "timeout" : "unreachable",
          message: aborted ? "The server did not answer in time" : "The server cannot be reached",
          hint: "Check that the appliance is running; the page retries on its own." } };
      })
      .finally(function () { clearTimeout(timer); });
  }

  // ---- status --------------------------------------------------------------
  function renderIndex(s) {
    var idx = s.index || {};
    $("version").textContent = s.version ? "v" + s.version : "";
    $("index-sources").textContent = num(idx.sourceCount);
    $("index-chunks").textContent = num(idx.chunkCount);
    $("index-failed").textContent = num(idx.failedCount);
    $("index-search").textContent = s.index ? (idx.queryPath === "memory" ? "exact scan in memory" : idx.hasVectorIndex ? "vector index" : "no vector index (exact scan)") + ", " +
      (idx.hasKeywordIndex ? "keyword index" : "no keyword index") : "?";
    var config = s.config || {};
    $("index-roots").textContent = (config.baseDirs || []).map(label).join(", ") || "?";
    $("index-model").textContent = s.model ? s.model.id + (s.model.baked ? "" : " (not baked)") : "?";
    var warnings = $("index-warnings");
    clear(warnings);
    var problems = [];
    if (s.configError) problems.push(s.configError.code + ": " + s.configError.message + (s.configError.hint ? " (" + s.configError.hint + ")" : ""));
    if (s.indexError) problems.push(s.indexError.code + ": " + s.indexError.message + (s.indexError.hint ? " (" + s.indexError.hint + ")" : ""));
    ["rootsWarning", "schemeWarning", "consistencyWarning", "identityWarning", "identityMismatch"].forEach(function (key) {
      if (idx[key]) problems.push(idx[key]);
    });
    (s.ignoreProblems || []).forEach(function (p) { problems.push("ignore rules not applied, " + p.skipped + " left out: " + p.reason); });
    if (s.ocrHint) problems.push("OCR: " + s.ocrHint);
    var dict = s.dictionaries;
    if (dict && dict.state === "unavailable" && dict.error)
      problems.push("dictionaries: " + dict.error.message + (dict.error.hint ? " (" + dict.error.hint + ")" : "") + "; " + dict.effect);
    problems.forEach(function (text) { warnings.appendChild(el("li", label(text))); });
  }

  function renderRunning(s) {
    var box = $("sync-running");
    clear(box);
    var run = s.syncRunning;
    if (!run) {
      box.appendChild(el("p", "No sync is running.", "muted"));
      // firstSync comes with the whole status (every POLL_FULL_MS), not with /api/sync
      if (firstSync) box.appendChild(el("p", "First sync: " + label(firstSync.message), "pending"));
      return;
    }
    var phase = run.phase || "running";
    box.appendChild(el("p", "Sync running (" + phase + ", started by " + (run.startedBy || "?") + ", pid " + (run.pid || "?") + ")", "running"));
    var bar = el("progress");
    bar.id = "sync-progress";
    // Chunks written is what a sync waits for (the model); files only while no chunk count is known.
    if (run.chunksTotal) { bar.max = run.chunksTotal; bar.value = Math.min(run.chunksWritten || 0, run.chunksTotal); }
    else if (run.filesTotal) { bar.max = run.filesTotal; bar.value = run.filesDone || 0; }
    box.appendChild(bar);
    var converted = run.filesConverted || 0;
    var facts = phase === "scanning" ? num(run.filesSeen) + " files seen" :
      num(run.filesDone) + " / " + num(run.filesTotal) + " files stored" +
      (converted > (run.filesDone || 0) ? " (" + num(converted) + " converted)" : "") + ", " +
      num(run.chunksWritten) + (run.chunksTotal ? " / " + (run.chunksTotalKnown ? "" : "~") + num(run.chunksTotal) : "") +
      " chunks written" +
      (run.chunksReused ? " (" + num(run.chunksReused) + " reused without the model)" : "") +
      (run.chunksPerSecond ? ", " + run.chunksPerSecond.toFixed(1) + " chunks/s" : "") +
      (run.etaSeconds !== null && run.etaSeconds !== undefined ? ", about " + fmtDuration(run.etaSeconds) + " left" :
        phase === "indexing" ? ", estimating the time left" : "");
    box.appendChild(el("p", facts));
    if (run.currentPath) box.appendChild(el("p", "At " + label(run.currentPath), "path"));
  }

  function failureList(failed, count) {
    var list = el("ul", null, "failures");
    (failed || []).slice(0, MAX_ROWS).forEach(function (f) {
      var item = el("li");
      item.appendChild(el("span", label(f.path || f.source || "?"), "path"));
      item.appendChild(el("span", " " + (f.code || "failed") + ": " + label(f.reason || f.message || ""), "reason"));
      list.appendChild(item);
    });
    var more = (count || (failed || []).length) - Math.min((failed || []).length, MAX_ROWS);
    if (more > 0) list.appendChild(el("li", "… and " + more + " more (`minirag list` names them all)", "muted"));
    return list;
  }

  function counts(r) {
    return num(r.seen) + " seen, " + num(r.added) + " added, " + num(r.updated) + " updated, " + num(r.deleted) +
      " deleted, " + num(r.unchanged) + " unchanged, " + num(r.failedCount) + " failed, " +
      num(r.skippedCount) + " not indexed (left out), " + num(r.chunks) +
      " chunks in " + fmtDuration(r.seconds);
  }

  function renderLastSyncs(s) {
    var box = $("last-sync");
    clear(box);
    var last = s.lastSync;
    if (!last) {
      box.appendChild(el("p", "No sync has finished on this index yet.", "muted"));
    } else {
      var head = el("p");
      head.id = "last-sync-summary";
      head.textContent = "Finished " + fmtTime(last.finishedAt, s.now) + (last.scope ? " under " + label(last.scope) : "") + ": " + counts(last);
      box.appendChild(head);
      if ((last.failed || []).length) box.appendChild(failureList(last.failed, last.failedCount));
      if ((last.skipped || []).length) {
        box.appendChild(el("p", "Left out (not indexed), by reason:", "muted"));
        box.appendChild(failureList(last.skipped, last.skippedCount));
      }
    }
    (s.recentJobs || []).filter(function (j) { return j.kind === "sync" || !j.kind; }).forEach(function (job) {
      var line = "Job " + job.jobId + " (MCP sync_start" + (job.path ? " under " + label(job.path) : "") + "): " + job.phase +
        (job.finishedAt ? ", finished " + fmtTime(job.finishedAt, s.now) : ", started " + fmtTime(job.startedAt, s.now));
      box.appendChild(el("p", line, "job"));
      if (job.error) box.appendChild(el("p", job.error.code + ": " + label(job.error.message), "error"));
      if ((job.failures || []).length) box.appendChild(failureList(job.failures));
    });
  }

  function renderScheduler(s) {
    var box = $("scheduler");
    clear(box);
    var sch = s.scheduler;
    if (!sch) { box.appendChild(el("p", "No scheduler has run on this index (manual syncs only).", "muted")); return; }
    var dl = el("dl", null, "facts");
    function fact(name, value, id) {
      dl.appendChild(el("dt", name));
      var dd = el("dd", value);
      if (id) dd.id = id;
      dl.appendChild(dd);
    }
    fact("State", sch.state + (sch.interrupted ? " (interrupted during a sync)" : ""), "scheduler-state");
    fact("Next run", sch.state === "off" ? "off (SYNC_INTERVAL=0)" : fmtTime(sch.nextRunAt, s.now), "scheduler-next");
    if (sch.intervalSeconds) fact("Every", fmtDuration(sch.intervalSeconds));
    fact("Last run", fmtTime(sch.lastRunFinishedAt, s.now) + (sch.lastResult ? ": " + sch.lastResult : ""));
    if (sch.lastReport) fact("Last counts", counts(sch.lastReport));
    if (sch.lastError) fact("Last error", (sch.lastError.code || "error") + ": " + label(sch.lastError.message || ""));
    if (sch.problem) fact("Problem", label(sch.problem));
    box.appendChild(dl);
  }

  // The sync part (/api/sync: cheap) every POLL_SYNC_MS, so even a sync of a few seconds shows;
  // the whole status every POLL_FULL_MS, and at once when a sync ends.
  var lastFull = 0;
  var wasSyncing = false;
  var firstSync = null;

  function refreshStatus() {
    clearTimeout(pollTimer);
    var full = Date.now() - lastFull >= POLL_FULL_MS;
    return getJSON(full ? "/api/status" : "/api/sync").then(function (answer) {
      var syncing = false;
      if (answer.ok) {
        var s = answer.data;
        showError($("page-error"), null);
        if (full) {
          lastFull = Date.now();
          renderIndex(s);
          firstSync = s.firstSync || null;
          $("logout-form").hidden = !s.signInRequired;
        }
        renderRunning(s);
        renderLastSyncs(s);
        renderScheduler(s);
        $("updated").textContent = "updated " + new Date().toLocaleTimeString();
        syncing = !!s.syncRunning;
        if (wasSyncing && !syncing) lastFull = 0;  // the sync ended: fresh counts now
        wasSyncing = syncing;
      } else {
        showError($("page-error"), answer.error);
      }
      pollTimer = setTimeout(refreshStatus, POLL_SYNC_MS);
    });
  }

  // ---- search --------------------------------------------------------------
  function renderHits(data) {
    var list = $("hits");
    clear(list);
    var hits = data.results || [];
    $("search-note").textContent = hits.length ? hits.length + " hits" + (data.trimmed ? " (some left out to keep the answer short)" : "") :
      "No hits.";
    hits.forEach(function (hit) {
      var item = el("li", null, "hit");
      var head = el("div", null, "hit-head");
      head.appendChild(el("span", label(hit.citation || hit.displayPath), "citation"));
      if (hit.title) head.appendChild(el("span", label(hit.title), "title"));
      if (typeof hit.score === "number") head.appendChild(el("span", "score " + hit.score.toFixed(3), "muted"));
      var open = el("button", "Open", "open");
      open.type = "button";
      open.addEventListener("click", function () { openDocument(hit); });
      head.appendChild(open);
      item.appendChild(head);
      if (hit.heading) item.appendChild(el("div", label(hit.heading), "heading"));
      item.appendChild(el("p", hit.text, "passage"));
      list.appendChild(item);
    });
  }

  function search(event) {
    event.preventDefault();
    var q = $("search-q").value;
    var k = $("search-k").value;
    $("search-button").disabled = true;
    $("search-note").textContent = "Searching…";
    getJSON("/api/search?q=" + encodeURIComponent(q) + "&k=" + encodeURIComponent(k)).then(function (answer) {
      $("search-button").disabled = false;
      if (answer.ok) {
        showError($("search-error"), null);
        renderHits(answer.data);
      } else {
        clear($("hits"));
        $("search-note").textContent = "";
        showError($("search-error"), answer.error);
      }
    });
  }

  // ---- the document reader -------------------------------------------------
  function readPage(offset) {
    var url = "/api/read?" + reader.query + "&offset=" + offset + (reader.revision ? "&revision=" + encodeURIComponent(reader.revision) : "");
    $("reader-more").disabled = true;
    return getJSON(url).then(function (answer) {
      $("reader-more").disabled = false;
      if (!answer.ok) { showError($("reader-error"), answer.error); $("reader-more").hidden = true; return; }
      var doc = answer.data;
      showError($("reader-error"), null);
      $("reader-title").textContent = label(doc.title || doc.displayPath || doc.source);
      $("reader-meta").textContent = label(doc.displayPath) + " · " + num(doc.totalChars) + " characters in " + num(doc.chunkCount) + " chunks";
      $("reader-content").appendChild(document.createTextNode(doc.content));
      reader.revision = doc.revision;
      reader.nextOffset = doc.nextOffset;
      $("reader-more").hidden = doc.nextOffset === null || doc.nextOffset === undefined;
    });
  }

  function openDocument(hit) {
    reader.query = hit.filePath ? "path=" + encodeURIComponent(hit.filePath) : "source=" + encodeURIComponent(hit.source);
    reader.revision = null;
    clear($("reader-content"));
    $("reader-title").textContent = label(hit.displayPath);
    $("reader-meta").textContent = "Loading…";
    $("reader").hidden = false;
    $("reader").scrollIntoView();
    readPage(0);
  }

  document.addEventListener("DOMContentLoaded", function () {
    $("search-form").addEventListener("submit", search);
    $("reader-more").addEventListener("click", function () { readPage(reader.nextOffset); });
    $("reader-close").addEventListener("click", function () { $("reader").hidden = true; clear($("reader-content")); });
    refreshStatus();
  });
})();
