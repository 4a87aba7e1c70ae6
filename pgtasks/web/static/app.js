// pgtasks dashboard (no build step). Live pages: the server renders the live part of a
// page and pushes it over server-sent events; this swaps it in (htmx), keeping the
// ticked jobs and never while the reader has text selected in it. The jobs list: ticked
// jobs counted in the buttons, the bulk buttons say how many jobs they touch.
(function () {
  "use strict";
  var status = null;

  function setStatus(text, kind) {
    if (status) { status.textContent = text; status.className = "live-status " + kind; }
  }

  function selecting(live) {
    var selection = window.getSelection ? window.getSelection() : null;
    return !!(selection && !selection.isCollapsed && selection.anchorNode &&
              live.contains(selection.anchorNode));
  }

  function ticked() {
    return Array.prototype.slice.call(
      document.querySelectorAll('input[type="checkbox"][name="id"]:checked'));
  }

  function updateSelection() {
    var count = ticked().length;
    document.querySelectorAll("[data-selected-count]").forEach(function (span) {
      span.textContent = count ? " (" + count + ")" : "";
    });
    document.querySelectorAll("[data-needs-selection]").forEach(function (button) {
      button.disabled = count === 0;
    });
    var all = document.getElementById("select-all");
    var boxes = document.querySelectorAll('input[type="checkbox"][name="id"]');
    if (all) { all.checked = boxes.length > 0 && count === boxes.length; }
  }

  function startLive(live) {
    status = document.getElementById("live-status");
    if (!window.EventSource) { setStatus("static", ""); return; }
    var deferred = null;
    function apply(html) {
      if (selecting(live)) { deferred = html; return; }
      deferred = null;
      var keep = {};
      ticked().forEach(function (box) { keep[box.value] = true; });
      window.htmx.swap(live, html, { swapStyle: "innerHTML" });
      live.querySelectorAll('input[type="checkbox"][name="id"]').forEach(function (box) {
        box.checked = !!keep[box.value];
      });
      updateSelection();
      live.setAttribute("data-updated", String(Date.now()));
    }
    var source = new EventSource(live.getAttribute("data-live"));
    source.addEventListener("open", function () { setStatus("live", "on"); });
    source.addEventListener("error", function () { setStatus("reconnecting", "off"); });
    source.addEventListener("update", function (event) { apply(event.data); });
    document.addEventListener("selectionchange", function () {
      if (deferred !== null && !selecting(live)) { apply(deferred); }
    });
    window.addEventListener("pagehide", function () { source.close(); });
  }

  function loadBulkCounts() {
    var holder = document.querySelector("[data-counts-url]");
    if (!holder || !window.fetch) { return; }
    window.fetch(holder.getAttribute("data-counts-url"), {
      headers: { accept: "application/json" }, credentials: "same-origin"
    }).then(function (response) {
      return response.ok ? response.json() : null;
    }).then(function (counts) {
      if (!counts) { return; }
      ["retryable", "cancellable"].forEach(function (kind) {
        var text = " " + (counts.estimated && kind === "retryable" ? "≈" : "") +
          counts[kind].toLocaleString("en-US") + (counts[kind + "_capped"] ? "+" : "");
        document.querySelectorAll('[data-bulk-count="' + kind + '"]').forEach(function (span) {
          span.textContent = text;
          var form = span.closest("form");
          var question = form && form.getAttribute("data-confirm");
          if (question) {
            form.setAttribute("data-confirm", question.replace("{" + kind + "}", " (" + text.trim() + " jobs)"));
          }
          var button = span.closest("button");
          if (button) { button.disabled = counts[kind] === 0; }
        });
      });
    }).catch(function () { /* the buttons keep their text without a count */ });
  }

  function start() {
    var live = document.getElementById("live");
    if (live && live.getAttribute("data-live")) { startLive(live); }
    loadBulkCounts();
    updateSelection();
  }

  document.addEventListener("change", function (event) {
    var target = event.target;
    if (target && target.id === "select-all") {
      document.querySelectorAll('input[type="checkbox"][name="id"]').forEach(function (box) {
        box.checked = target.checked;
      });
    }
    if (target && target.type === "checkbox") { updateSelection(); }
  });
  // Destructive forms and buttons carry data-confirm: ask first (inline handlers are not
  // allowed by the Content-Security-Policy, so this listens on the document).
  document.addEventListener("submit", function (event) {
    var submitter = event.submitter;
    var question = (submitter && submitter.getAttribute("data-confirm")) ||
      (event.target.getAttribute && event.target.getAttribute("data-confirm"));
    if (!question) { return; }
    question = question.replace("{selected}", String(ticked().length))
      .replace(/\{(retryable|cancellable)\}/, "");
    if (!window.confirm(question)) { event.preventDefault(); }
  });
  if (document.readyState === "loading") {
    document.addEventListener("DOMContentLoaded", start);
  } else {
    start();
  }
})();
