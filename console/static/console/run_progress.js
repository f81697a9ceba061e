/* The live run page: every panel comes from the run's progress endpoint (one snapshot,
   rendered by the same templates as the page), swapped in every two seconds until the run is
   finished; the last answer is the final state, so the page never needs a reload. */
(function () {
  var first = document.getElementById("run-status");
  if (!first || first.dataset.finished === "1") { return; }
  // The batch table's page travels with the poll, so the rows on screen stay the ones shown.
  var url = first.dataset.progressUrl + window.location.search;
  function swap(id, html) {
    var old = document.getElementById(id);
    if (!old || !html) { return; }
    var holder = document.createElement("div");
    holder.innerHTML = html;
    var fresh = holder.firstElementChild;
    if (fresh) { old.replaceWith(fresh); }
  }
  function update(data) {
    Object.keys(data.panels || {}).forEach(function (id) { swap(id, data.panels[id]); });
    Object.keys(data.fields || {}).forEach(function (name) {
      var cell = document.querySelector(".field-" + name + " .readonly");
      if (cell) { cell.textContent = data.fields[name]; }
    });
  }
  function poll() {
    fetch(url, {credentials: "same-origin", headers: {"Accept": "application/json"}})
      .then(function (r) { return r.ok ? r.json() : null; })
      .then(function (data) {
        if (data) { update(data); }
        if (!data || !data.finished) { setTimeout(poll, 2000); }
      })
      .catch(function () { setTimeout(poll, 5000); });
  }
  setTimeout(poll, 2000);
})();
