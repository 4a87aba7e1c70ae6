// pgtasks dashboard: live overview over server-sent events (no build step).
// The server renders the overview's live part; this swaps it in with htmx.
(function () {
  "use strict";
  function start() {
    var live = document.getElementById("live");
    var status = document.getElementById("live-status");
    if (!live || !window.EventSource) {
      if (status) { status.textContent = "static"; }
      return;
    }
    var source = new EventSource(live.getAttribute("data-live"));
    source.addEventListener("open", function () {
      if (status) { status.textContent = "live"; status.className = "live-status on"; }
    });
    source.addEventListener("error", function () {
      if (status) { status.textContent = "reconnecting"; status.className = "live-status off"; }
    });
    source.addEventListener("overview", function (event) {
      window.htmx.swap(live, event.data, { swapStyle: "innerHTML" });
      live.setAttribute("data-updated", String(Date.now()));
    });
    window.addEventListener("pagehide", function () { source.close(); });
  }
  // Destructive forms carry data-confirm: ask first (inline handlers are not allowed by
  // the Content-Security-Policy, so this listens on the document).
  document.addEventListener("submit", function (event) {
    var question = event.target.getAttribute && event.target.getAttribute("data-confirm");
    if (question && !window.confirm(question)) { event.preventDefault(); }
  });
  if (document.readyState === "loading") {
    document.addEventListener("DOMContentLoaded", start);
  } else {
    start();
  }
})();
