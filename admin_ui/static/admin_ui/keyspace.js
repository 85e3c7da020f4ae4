// The key-space bar: clicking a segment ticks its checkbox (the checkboxes stay usable from the
// keyboard); a ticked segment is outlined.
(function () {
  var form = document.getElementById("scale-form");
  if (!form) return;
  function box(id) { return form.querySelector('.seg[data-segment="' + id + '"]'); }
  form.querySelectorAll('input[name="segment"]').forEach(function (input) {
    input.addEventListener("change", function () {
      box(input.value).classList.toggle("chosen", input.checked);
    });
  });
  form.querySelectorAll(".seg").forEach(function (seg) {
    seg.addEventListener("click", function () {
      var input = form.querySelector('input[name="segment"][value="' + seg.dataset.segment + '"]');
      input.checked = !input.checked;
      seg.classList.toggle("chosen", input.checked);
    });
  });
})();
