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
