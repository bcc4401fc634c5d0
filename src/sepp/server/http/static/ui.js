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
