// Dark or light: the choice kept in this browser, else the system's. Runs before the page
// paints (no flash); the toggle button in the header flips it.
(function () {
  var key = "millrace-theme";
  var chosen = localStorage.getItem(key);
  var dark = window.matchMedia && window.matchMedia("(prefers-color-scheme: dark)").matches;
  document.documentElement.dataset.theme = chosen || (dark ? "dark" : "light");
  document.addEventListener("DOMContentLoaded", function () {
    var button = document.getElementById("theme-toggle");
    if (!button) return;
    button.addEventListener("click", function () {
      var next = document.documentElement.dataset.theme === "dark" ? "light" : "dark";
      document.documentElement.dataset.theme = next;
      localStorage.setItem(key, next);
    });
  });
})();
