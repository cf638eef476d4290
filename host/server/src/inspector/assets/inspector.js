// The inspector's live parts. Every page reads without this script; it only keeps pages
// current: a task's timeline appends the rows its SSE stream sends (rendered and escaped by
// the host), and the first page of the task list fetches its rows again when a task changes.
// No inline script runs (the Content-Security-Policy forbids it); this file is the host's own.
"use strict";

(function () {
  function followTimeline(table) {
    var url = table.getAttribute("data-stream");
    var body = table.tBodies[0];
    var live = document.getElementById("live");
    var status = document.getElementById("task-status");
    var source = new EventSource(url);
    source.addEventListener("open", function () {
      if (live) { live.textContent = " Live."; }
    });
    source.addEventListener("row", function (e) {
      var seq = Number(e.lastEventId);
      if (document.getElementById("ev-" + seq)) { return; }
      // The host rendered and escaped the row; it is markup of the page's own kind.
      body.insertAdjacentHTML("beforeend", e.data);
      var row = body.lastElementChild;
      if (row) {
        row.classList.add("fresh");
        var set = row.getAttribute("data-status");
        if (set && status) {
          var badge = status.querySelector(".badge");
          if (badge) { badge.textContent = set; badge.className = "badge " + set; }
        }
      }
      if (live) { live.textContent = " Live: event " + seq + " arrived."; }
    });
    source.addEventListener("error", function () {
      if (live) { live.textContent = " Reconnecting…"; }
    });
  }

  function followList(table) {
    var body = table.tBodies[0];
    var source = new EventSource(table.getAttribute("data-live"));
    var busy = false;
    source.addEventListener("changed", function () {
      if (busy) { return; }
      busy = true;
      var url = window.location.pathname + window.location.search;
      url += (url.indexOf("?") < 0 ? "?" : "&") + "part=rows";
      fetch(url, { credentials: "same-origin" })
        .then(function (r) { return r.ok ? r.text() : null; })
        .then(function (html) { if (html !== null) { body.innerHTML = html; } })
        .catch(function () {})
        .then(function () { busy = false; });
    });
  }

  function confirmForms() {
    var forms = document.querySelectorAll("form[data-confirm]");
    Array.prototype.forEach.call(forms, function (form) {
      form.addEventListener("submit", function (e) {
        if (!window.confirm(form.getAttribute("data-confirm"))) { e.preventDefault(); }
      });
    });
  }

  function start() {
    var timeline = document.querySelector("table[data-stream]");
    if (timeline && window.EventSource) { followTimeline(timeline); }
    var list = document.querySelector("table[data-live]");
    if (list && window.EventSource && window.fetch) { followList(list); }
    confirmForms();
  }

  if (document.readyState === "loading") {
    document.addEventListener("DOMContentLoaded", start);
  } else {
    start();
  }
})();
