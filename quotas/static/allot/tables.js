// Tables that fit (issue #27.7). Each cell of a table inside .scroll gets its column's header as a
// data-label; on a phone (base.html's stylesheet) such tables stack: one card per row, each value
// beside its column's name, so no column is hidden off to the right. Without JavaScript the same
// tables scroll sideways inside their box, as before.
document.addEventListener("DOMContentLoaded", function () {
  document.querySelectorAll(".scroll > table").forEach(function (table) {
    var heads = Array.prototype.map.call(table.querySelectorAll("thead tr:last-child th"), function (th) {
      return th.textContent.trim();
    });
    if (!heads.length) return;
    table.classList.add("stacks");
    table.querySelectorAll("tbody tr").forEach(function (row) {
      var column = 0;
      Array.prototype.forEach.call(row.children, function (cell) {
        // a cell across every column (a form under its row) belongs to no one column: no label
        if ((cell.colSpan || 1) >= heads.length && !cell.hasAttribute("data-label")) cell.setAttribute("data-label", "");
        if (heads[column] && !cell.hasAttribute("data-label")) cell.setAttribute("data-label", heads[column]);
        column += cell.colSpan || 1;
      });
    });
  });
});
