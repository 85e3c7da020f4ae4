// The dashboard's live charts: polls the node's counters every 2 s and plots the rates (the
// change between two polls) for the last 5 minutes with uPlot. The figures above the chart are
// the rates over the console's one window (the traffic monitors'), as every page shows them.
// The time axis always spans the last 5 minutes, so the first frames show minutes, not years.
(function () {
  var url = document.getElementById("dashboard-script").dataset.live;
  var SPAN_S = 300, keep = 150, last = null;
  var times = [], events = [], bytes = [], lag = [], backlog = [];
  function human(n) {
    var units = ["B", "KiB", "MiB", "GiB", "TiB"], i = 0;
    while (Math.abs(n) >= 1024 && i < units.length - 1) { n /= 1024; i++; }
    return n.toFixed(i ? 1 : 0) + " " + units[i];
  }
  function plot(id, series, data) {
    // the first series on the left axis, the second on its own scale and a right axis
    var el = document.getElementById(id);
    var opts = {
      width: el.clientWidth || 500, height: 180, series: [{}].concat(series),
      scales: { x: { time: true, range: function () {
        var now = Date.now() / 1000;
        return [now - SPAN_S, now];
      } } },
      axes: [{}, { size: 70 }, { scale: series[1].scale, side: 1, size: 70, grid: { show: false } }],
      legend: { live: false },
    };
    return new uPlot(opts, data, el);
  }
  var throughput = plot("chart-throughput", [
    { label: "events/s", stroke: "#1095c1", width: 2 },
    { label: "bytes/s", stroke: "#d9822b", width: 1, scale: "bytes" },
  ], [times, events, bytes]);
  var tiers = plot("chart-tiers", [
    { label: "tier-2 lag (bytes)", stroke: "#8e44ad", width: 2 },
    { label: "tier-1 backlog (ops)", stroke: "#2a9d4b", width: 1, scale: "ops" },
  ], [times, lag, backlog]);
  function push(arr, v) { arr.push(v); if (arr.length > keep) arr.shift(); }
  function poll() {
    fetch(url, { credentials: "same-origin" }).then(function (r) { return r.json(); }).then(function (now) {
      var t = now.totals;
      if (last) {
        var dt = Math.max(now.time - last.time, 0.001);
        var er = Math.max(((t.events || 0) - (last.totals.events || 0)) / dt, 0);
        var br = Math.max(((t.bytes || 0) - (last.totals.bytes || 0)) / dt, 0);
        push(times, now.time); push(events, er); push(bytes, br);
        push(lag, t.tier2_lag_bytes || 0); push(backlog, t.tier1_backlog_operations || 0);
        throughput.setData([times, events, bytes]);
        tiers.setData([times, lag, backlog]);
      }
      document.getElementById("rate-events").textContent = (now.eventsPerSecond || 0).toFixed(1);
      document.getElementById("rate-bytes").textContent = human(now.bytesPerSecond || 0);
      document.getElementById("tier2-lag").textContent = human(t.tier2_lag_bytes || 0);
      document.getElementById("tier1-backlog").textContent = (t.tier1_backlog_operations || 0).toFixed(0);
      document.getElementById("cache-memory").textContent = human(t.cache_bytes || 0);
      document.getElementById("cache-disk").textContent = human(t.disk_cache_bytes || 0);
      document.getElementById("live-status").textContent = now.nodesDown.length
        ? "no metrics from: " + now.nodesDown.join(", ") : "";
      last = now;
    }).catch(function (e) {
      document.getElementById("live-status").textContent = "live numbers unavailable: " + e;
    });
  }
  poll();
  setInterval(poll, 2000);
})();
