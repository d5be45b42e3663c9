// The quota form (templates/quotas/unit_edit.html). htmx checks the form 300 ms after each keystroke;
// saving must not race that check: once the form is being saved no check is sent (a check fired
// during the page change reached the server beside the save), a second click does not save twice,
// and Save waits while a check is in flight (its answer may show a violation).
document.addEventListener("DOMContentLoaded", function () {
  var form = document.getElementById("quota-form");
  if (!form) return;
  var save = form.querySelector("button[type=submit]");
  var saving = false;
  form.addEventListener("submit", function (event) {
    if (saving) { event.preventDefault(); return; }
    saving = true;
    if (save) { save.disabled = true; save.setAttribute("aria-busy", "true"); }
  });
  form.addEventListener("htmx:beforeRequest", function (event) {
    if (saving) { event.preventDefault(); return; }
    if (save) { save.disabled = true; save.title = "Checking your values…"; }
  });
  form.addEventListener("htmx:afterRequest", function () {
    if (save && !saving) { save.disabled = false; save.title = ""; }
  });
});
