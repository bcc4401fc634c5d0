// sepp admin UI: progressive enhancements only; every page works without JavaScript.
"use strict";

// Forms with data-confirm, and submit buttons with data-confirm, ask before submitting
// (destructive actions).
document.addEventListener("submit", function (event) {
  var form = event.target;
  if (!(form instanceof HTMLFormElement)) {
    return;
  }
  var button = event.submitter;
  var ask = (button && button.dataset && button.dataset.confirm) || form.dataset.confirm;
  if (ask && !window.confirm(ask)) {
    event.preventDefault();
  }
});

// Bulk actions: a header checkbox ticks every row of its form; the form shows
// how many rows are ticked.
function bulkBoxes(formId) {
  return document.querySelectorAll('input[type="checkbox"][name="job_id"][form="' + formId + '"]');
}

function bulkCount(formId) {
  var form = document.getElementById(formId);
  var label = form && form.querySelector("[data-selected-count]");
  if (!label) {
    return;
  }
  var n = 0;
  bulkBoxes(formId).forEach(function (box) { if (box.checked) { n += 1; } });
  label.textContent = n ? n + " selected:" : "Tick jobs below:";
}

document.addEventListener("change", function (event) {
  var box = event.target;
  if (!(box instanceof HTMLInputElement) || box.type !== "checkbox") {
    return;
  }
  if (box.dataset.selectAll) {
    bulkBoxes(box.dataset.selectAll).forEach(function (other) { other.checked = box.checked; });
    bulkCount(box.dataset.selectAll);
  } else if (box.name === "job_id" && box.getAttribute("form")) {
    bulkCount(box.getAttribute("form"));
  }
});

// Local-time display: the pages write every time in UTC ("2026-05-01 10:30:05 UTC", with
// its ISO form in <time datetime>). The header's toggle shows them in the browser's zone
// instead ("2026-05-01 12:30:05 UTC+02:00"); the choice is kept in localStorage, UTC the
// default. Times polled in by htmx are converted as they arrive.
var TIMES_KEY = "sepp.times";

function timesLocal() {
  try {
    return window.localStorage.getItem(TIMES_KEY) === "local";
  } catch (e) {
    return false;
  }
}

function pad(n) {
  return (n < 10 ? "0" : "") + n;
}

function localText(iso) {
  var d = new Date(iso);
  if (isNaN(d.getTime())) {
    return null;
  }
  var offset = -d.getTimezoneOffset();
  var sign = offset < 0 ? "-" : "+";
  offset = Math.abs(offset);
  return d.getFullYear() + "-" + pad(d.getMonth() + 1) + "-" + pad(d.getDate()) + " " + pad(d.getHours()) + ":" +
    pad(d.getMinutes()) + ":" + pad(d.getSeconds()) + " UTC" + sign + pad(Math.floor(offset / 60)) + ":" +
    pad(offset % 60);
}

function applyTimes() {
  var local = timesLocal();
  document.querySelectorAll("time[datetime]").forEach(function (el) {
    if (el.dataset.utc === undefined) {
      if (!/ UTC$/.test(el.textContent)) {
        return;  // not a written-out time ("3 s ago"): left alone
      }
      el.dataset.utc = el.textContent;
    }
    var shown = local ? localText(el.getAttribute("datetime")) : null;
    el.textContent = shown || el.dataset.utc;
    if (shown) {
      el.title = el.dataset.utc;
    } else {
      el.removeAttribute("title");
    }
  });
  var toggle = document.getElementById("times-toggle");
  if (toggle) {
    toggle.hidden = false;
    toggle.setAttribute("aria-pressed", local ? "true" : "false");
    toggle.textContent = local ? "Times: local" : "Times: UTC";
    toggle.title = local ? "Times are shown in this browser's time zone; click for UTC" :
      "Times are shown in UTC; click for this browser's time zone";
  }
}

document.addEventListener("click", function (event) {
  var toggle = event.target;
  if (!(toggle instanceof HTMLElement) || toggle.id !== "times-toggle") {
    return;
  }
  try {
    window.localStorage.setItem(TIMES_KEY, timesLocal() ? "utc" : "local");
  } catch (e) {
    return;  // storage refused: nothing to remember the choice in
  }
  applyTimes();
});

document.addEventListener("htmx:afterSettle", applyTimes);
applyTimes();
