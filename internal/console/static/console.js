// The console's only script. Pages are complete without it; with it, the
// part of a page marked data-live is fetched again whenever the server's
// event stream (data-events) says that something it shows changed.
(function () {
  "use strict";
  var live = document.getElementById("live");
  if (!live || !window.EventSource || !window.fetch) {
    return;
  }
  var url = live.getAttribute("data-live");
  var stream = live.getAttribute("data-events");
  if (!url || !stream) {
    return;
  }
  var waiting = false;
  var again = false;
  function refresh() {
    if (waiting) {
      again = true;
      return;
    }
    waiting = true;
    fetch(url, { credentials: "same-origin", headers: { "Accept": "text/html" } })
      .then(function (r) { return r.ok ? r.text() : null; })
      .then(function (html) {
        // The server escaped everything in it: it is the page's own HTML.
        if (html !== null) {
          live.innerHTML = html;
          live.setAttribute("data-refreshed", String(Date.now()));
        }
      })
      .catch(function () {})
      .then(function () {
        waiting = false;
        if (again) {
          again = false;
          setTimeout(refresh, 250);
        }
      });
  }
  var timer = null;
  var events = new EventSource(stream);
  events.addEventListener("change", function () {
    if (timer === null) {
      timer = setTimeout(function () { timer = null; refresh(); }, 200);
    }
  });
  document.documentElement.setAttribute("data-live-ready", "true");
})();
