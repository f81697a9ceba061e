/* A statement import's page: the counts come from the import's progress endpoint every two
   seconds; once the import is finished the page reloads to show the outcome (the statement's
   link or the problems), rendered by the server. */
(function () {
  var panel = document.getElementById("import-status");
  if (!panel || panel.dataset.finished === "1") { return; }
  var url = panel.dataset.progressUrl;
  function set(id, value) {
    var cell = document.getElementById(id);
    if (cell && value !== null && value !== undefined) { cell.textContent = value; }
  }
  function poll() {
    fetch(url, {credentials: "same-origin", headers: {"Accept": "application/json"}})
      .then(function (r) { return r.ok ? r.json() : null; })
      .then(function (data) {
        if (data) {
          set("import-state", data.status);
          set("import-outcome", data.outcome);
          set("import-rows-checked", data.rows_checked);
          set("import-rows-done", data.rows_done);
          set("import-rows-total", data.rows_total);
          if (data.finished) { window.location.reload(); return; }
        }
        setTimeout(poll, 2000);
      })
      .catch(function () { setTimeout(poll, 5000); });
  }
  setTimeout(poll, 2000);
})();
