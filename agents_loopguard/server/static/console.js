// Shows every <time datetime="...Z"> in the viewer's time zone; the UTC text stays in the title.
(function () {
  "use strict";
  var format = new Intl.DateTimeFormat(undefined, {
    year: "numeric", month: "short", day: "2-digit",
    hour: "2-digit", minute: "2-digit", second: "2-digit", timeZoneName: "short"
  });
  function localize() {
    document.querySelectorAll("time[datetime]").forEach(function (el) {
      var moment = new Date(el.getAttribute("datetime"));
      if (!isNaN(moment.getTime())) {
        el.textContent = format.format(moment);
        el.title = el.getAttribute("datetime").replace("T", " ").replace("Z", " UTC");
        el.classList.add("local");
      }
    });
  }
  if (document.readyState === "loading") {
    document.addEventListener("DOMContentLoaded", localize);
  } else {
    localize();
  }
})();
