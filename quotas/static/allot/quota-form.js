// The quota form (templates/quotas/unit_edit.html). htmx checks the form 300 ms after each keystroke;
// saving must not race that check: once the form is being saved no check is sent (a check fired
// during the page change reached the server beside the save), a second click does not save twice,
// and Save waits while a check is in flight (its answer may show a violation). Used by the quota form
// and the rebalance form (both id="quota-form").
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
  // the check writes each field's message next to it: mark that field invalid (or valid again), and
  // open the folded CPU/memory rows when one of them has a message
  document.body.addEventListener("htmx:afterSettle", function () {
    form.querySelectorAll(".field-error").forEach(function (message) {
      var input = form.querySelector('[aria-describedby="' + message.id + '"]');
      if (!input) return;
      var bad = message.textContent.trim() !== "";
      input.classList.toggle("invalid", bad);
      if (bad) { input.setAttribute("aria-invalid", "true"); } else { input.removeAttribute("aria-invalid"); }
      var folded = input.closest("details");
      if (bad && folded) folded.open = true;
    });
  });
});
