// amos console: the little behaviour the pages have. Plain JavaScript,
// served by the binary; it only ever sets textContent (never HTML).
"use strict";

document.addEventListener("DOMContentLoaded", function () {
  // Copy buttons.
  document.querySelectorAll("[data-copy]").forEach(function (b) {
    b.addEventListener("click", function () {
      var text = b.getAttribute("data-copy");
      if (navigator.clipboard) {
        navigator.clipboard.writeText(text).then(function () {
          b.textContent = b.getAttribute("data-copied") || b.textContent;
        });
      }
    });
  });

  // Live peer status: one `peer` event after every sync session.
  if (document.body.dataset.page === "peers" && window.EventSource) {
    var es = new EventSource("/events");
    var live = document.getElementById("live");
    es.addEventListener("open", function () {
      document.body.dataset.live = "on";
      if (live) live.textContent = live.getAttribute("data-connected");
    });
    es.addEventListener("error", function () {
      document.body.dataset.live = "off";
      if (live) live.textContent = live.getAttribute("data-reconnecting");
    });
    es.addEventListener("peer", function (ev) {
      var p;
      try {
        p = JSON.parse(ev.data);
      } catch (e) {
        return;
      }
      document.querySelectorAll("tr[data-peer]").forEach(function (row) {
        if (row.getAttribute("data-peer") !== p.peer) return;
        var set = function (cls, text) {
          var c = row.querySelector("." + cls);
          if (c) c.textContent = text;
        };
        set("result", p.result);
        var r = row.querySelector(".result");
        if (r) r.className = "result result-" + p.result;
        if (p.result === "ok") set("last-sync", new Date(p.at_ms).toISOString());
        // A failed session moved nothing worth showing: the figures of the
        // last completed one stay.
        if (p.result === "ok") {
          set("facts", p.facts_in + " / " + p.facts_out);
          set("bytes", p.bytes_in + " / " + p.bytes_out);
        }
        if (p.digest) {
          set("digest", p.digest);
          var d = row.querySelector(".digest");
          if (d) d.className = "digest digest-" + p.digest;
        }
      });
    });
  }
});
