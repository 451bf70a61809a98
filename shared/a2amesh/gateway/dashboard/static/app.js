// Times are rendered as <time datetime="ISO UTC">; show them in the browser's own zone.
(function () {
  function localTimes(root) {
    if (!root || !root.querySelectorAll) return;
    root.querySelectorAll("time[datetime]").forEach(function (t) {
      var d = new Date(t.getAttribute("datetime"));
      if (!isNaN(d.getTime())) {
        t.textContent = d.toLocaleString();
        t.title = t.getAttribute("datetime");
      }
    });
  }
  document.addEventListener("DOMContentLoaded", function () { localTimes(document); });
  document.addEventListener("htmx:load", function (e) { localTimes(e.target); });
  document.addEventListener("htmx:afterSettle", function (e) { localTimes(e.target); });
})();

// Live updates: one EventSource per page on its [data-live] URL. Each "changed" message becomes a
// live:changed event on <body>, which the page's live parts listen to (hx-trigger="live:changed from:body").
// The page starts after the newest event stored when it was rendered (data-live-after), so nothing between
// the render and the connect is missed. The browser reconnects by itself with Last-Event-ID; when the source
// is closed for good (an error the browser gives up on, or close()), open() reconnects with ?after= the last
// id seen, so nothing is missed either.
(function () {
  function Live(el) {
    this.el = el;
    this.url = el.getAttribute("data-live");
    this.lastId = el.getAttribute("data-live-after") || null;  // the newest event when the page was rendered
    this.received = [];
    this.source = null;
  }
  Live.prototype.open = function () {
    var self = this, url = this.url;
    if (this.lastId !== null) url += (url.indexOf("?") < 0 ? "?" : "&") + "after=" + encodeURIComponent(this.lastId);
    var source = new EventSource(url);
    this.source = source;
    source.addEventListener("changed", function (e) {
      if (e.lastEventId) self.lastId = e.lastEventId;
      var detail = JSON.parse(e.data);
      self.received.push(detail);
      if (self.received.length > 100) self.received.shift();
      document.body.dispatchEvent(new CustomEvent("live:changed", { detail: detail }));
    });
    source.addEventListener("error", function () {
      if (source.readyState === EventSource.CLOSED && self.source === source) {
        setTimeout(function () { if (self.source === source) self.open(); }, 2000);
      }
    });
  };
  Live.prototype.close = function () {
    if (this.source) this.source.close();
    this.source = null;
  };
  document.addEventListener("DOMContentLoaded", function () {
    var el = document.querySelector("[data-live]");
    if (!el) return;
    window.a2ameshLive = new Live(el);
    window.a2ameshLive.open();
  });
})();
