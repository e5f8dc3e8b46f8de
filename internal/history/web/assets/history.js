// fieldwatch history: keyboard shortcuts. The pages work without it.
(function () {
  "use strict";
  var entries = [];
  var current = -1;

  function typing(e) {
    var t = e.target;
    return t && (t.tagName === "INPUT" || t.tagName === "SELECT" || t.tagName === "TEXTAREA" || t.isContentEditable);
  }

  function select(i) {
    if (entries.length === 0) { return; }
    i = Math.max(0, Math.min(entries.length - 1, i));
    if (current >= 0) { entries[current].classList.remove("current"); }
    current = i;
    var el = entries[i];
    el.classList.add("current");
    var link = el.querySelector("a.open");
    (link || el).focus();
    el.scrollIntoView({ block: "nearest" });
  }

  function toggleKeys() {
    var keys = document.getElementById("keys");
    var button = document.querySelector(".keys-toggle");
    keys.hidden = !keys.hidden;
    button.setAttribute("aria-expanded", String(!keys.hidden));
  }

  document.addEventListener("DOMContentLoaded", function () {
    entries = Array.prototype.slice.call(document.querySelectorAll("[data-entry]"));
    var button = document.querySelector(".keys-toggle");
    if (button) { button.addEventListener("click", toggleKeys); }
  });

  document.addEventListener("keydown", function (e) {
    if (e.ctrlKey || e.metaKey || e.altKey) { return; }
    if (e.key === "Escape") {
      var keys = document.getElementById("keys");
      if (!keys.hidden) { toggleKeys(); }
      if (typing(e)) { e.target.blur(); }
      return;
    }
    if (typing(e)) { return; }
    var link;
    switch (e.key) {
    case "/":
      var first = document.querySelector(".filters input");
      if (first) { e.preventDefault(); first.focus(); }
      break;
    case "j":
      select(current + 1);
      break;
    case "k":
      select(current - 1);
      break;
    case "n":
      link = document.querySelector("[data-key=n]");
      if (link) { link.click(); }
      break;
    case "p":
      link = document.querySelector("[data-key=p]");
      if (link) { link.click(); }
      break;
    case "?":
      toggleKeys();
      break;
    }
  });
}());
