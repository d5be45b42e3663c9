// The navigation on a phone (issue #42): thirteen links wrapped over a quarter of a 390 px screen. Below
// 640 px (base.html's stylesheet) they fold behind one Menu button, which carries the count of change
// requests waiting for the reader; this opens and closes it. Without JavaScript the links stay open.
// Loaded without defer in <head>: the class "js" is set before the page is drawn, so nothing jumps.
document.documentElement.classList.add("js");
document.addEventListener("DOMContentLoaded", function () {
  var button = document.querySelector(".menu-toggle");
  var header = button && button.closest("header");
  if (!header) return;
  button.addEventListener("click", function () {
    var open = header.classList.toggle("open");
    button.setAttribute("aria-expanded", open ? "true" : "false");
  });
});
