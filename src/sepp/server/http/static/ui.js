// sepp admin UI: progressive enhancements only; every page works without JavaScript.
"use strict";

// Forms with data-confirm ask before submitting (destructive actions).
document.addEventListener("submit", function (event) {
  var form = event.target;
  if (form instanceof HTMLFormElement && form.dataset.confirm && !window.confirm(form.dataset.confirm)) {
    event.preventDefault();
  }
});
