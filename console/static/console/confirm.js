/* A form with data-confirm asks before it submits: the question is the attribute's text. The
   console's Content-Security-Policy forbids inline handlers (onsubmit="..."), so the ask lives
   here, a static file (console/csp.py). */
(function () {
  document.addEventListener("submit", function (event) {
    var form = event.target;
    var question = form && form.getAttribute && form.getAttribute("data-confirm");
    if (question && !window.confirm(question)) { event.preventDefault(); }
  });
})();
