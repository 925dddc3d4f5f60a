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
          var typed = keepReasons();
          replaceChanged(html);
          typed();
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
  // replaceChanged puts the fetched HTML in the live part, one top-level
  // node at a time, and leaves the nodes that did not change where they
  // are: a form a person is filling in stays the same element (with its
  // focus and what they typed) while the timeline beside it grows.
  function replaceChanged(html) {
    var next = document.createElement("div");
    next.innerHTML = html;
    var fresh = Array.prototype.slice.call(next.childNodes);
    var old = Array.prototype.slice.call(live.childNodes);
    for (var i = 0; i < fresh.length; i++) {
      if (i < old.length && old[i].isEqualNode(fresh[i])) {
        continue;
      }
      if (i < old.length) {
        live.replaceChild(fresh[i], old[i]);
      } else {
        live.appendChild(fresh[i]);
      }
    }
    for (var k = fresh.length; k < old.length; k++) {
      live.removeChild(old[k]);
    }
  }
  // keepReasons notes what a person typed in the reason boxes (and where
  // their cursor is), and which edit boxes they opened, and returns the
  // function that puts it back into the boxes of the same calls once the
  // live part is replaced.
  function keepReasons() {
    var kept = {};
    var focus = null;
    var open = {};
    var opened = live.querySelectorAll("details[data-open][open]");
    for (var j = 0; j < opened.length; j++) {
      open[opened[j].getAttribute("data-open")] = true;
    }
    var boxes = live.querySelectorAll("textarea[data-reason]");
    for (var i = 0; i < boxes.length; i++) {
      var b = boxes[i];
      var key = b.getAttribute("data-reason");
      if (b.value) {
        kept[key] = b.value;
      }
      if (b === document.activeElement) {
        focus = { key: key, start: b.selectionStart, end: b.selectionEnd };
      }
    }
    return function () {
      var details = live.querySelectorAll("details[data-open]");
      for (var j = 0; j < details.length; j++) {
        if (open[details[j].getAttribute("data-open")]) {
          details[j].open = true;
        }
      }
      var boxes = live.querySelectorAll("textarea[data-reason]");
      for (var i = 0; i < boxes.length; i++) {
        var b = boxes[i];
        var key = b.getAttribute("data-reason");
        if (Object.prototype.hasOwnProperty.call(kept, key)) {
          b.value = kept[key];
        }
        if (focus && focus.key === key) {
          b.focus();
          b.setSelectionRange(focus.start, focus.end);
        }
      }
    };
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
