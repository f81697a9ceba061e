/* Live progress: poll the run's status (same aggregation service) until it is finished,
   then reload once so every table shows the final counts. */
(function () {
  var cancel = document.getElementById("cancel-form");
  if (cancel) {
    cancel.addEventListener("submit", function (event) {
      if (!window.confirm(cancel.dataset.confirm)) { event.preventDefault(); }
    });
  }
  var panel = document.getElementById("run-status");
  if (!panel || panel.dataset.finished === "1") { return; }
  var url = panel.dataset.progressUrl;
  function update(data) {
    panel.querySelector(".geo-status-text").textContent =
      (data.planned - data.pending) + " of " + data.planned + " samples terminal (" + data.percent_terminal + "%)";
    var badge = panel.querySelector(".geo-badge");
    badge.textContent = data.outcome_label;
    badge.className = "geo-badge geo-" + data.outcome;
    badge.dataset.outcome = data.outcome;
    var bar = panel.querySelector(".geo-bar");
    bar.innerHTML = "";
    data.segments.forEach(function (seg) {
      var span = document.createElement("span");
      span.className = "geo-seg-" + seg.name;
      span.style.width = seg.width + "%";
      span.title = seg.name + ": " + seg.count;
      bar.appendChild(span);
    });
    ["planned", "succeeded", "review", "invalid", "failed", "pending", "uncertain", "parked"].forEach(function (name) {
      var cell = panel.querySelector('[data-count="' + name + '"]');
      if (cell) { cell.textContent = data[name]; }
    });
    if (data.finished) { window.location.reload(); }
  }
  function poll() {
    fetch(url, {credentials: "same-origin", headers: {"Accept": "application/json"}})
      .then(function (r) { return r.ok ? r.json() : null; })
      .then(function (data) { if (data) { update(data); } if (!data || !data.finished) { setTimeout(poll, 2000); } })
      .catch(function () { setTimeout(poll, 5000); });
  }
  setTimeout(poll, 2000);
})();
