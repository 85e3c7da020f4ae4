// The cluster page's chart: the containers each segment store node held after each of the
// latest moves (a step line per node), from the data the page embeds.
(function () {
  var data = JSON.parse(document.getElementById("cluster-chart").textContent);
  var el = document.getElementById("chart-containers");
  var names = Object.keys(data.series).sort();
  var colours = ["#1095c1", "#d9822b", "#8e44ad", "#2a9d4b", "#c0392b", "#7f8c8d"];
  var series = [{}].concat(names.map(function (name, i) {
    return { label: name, stroke: colours[i % colours.length], width: 2, paths: uPlot.paths.stepped({ align: 1 }) };
  }));
  new uPlot({ width: el.clientWidth || 600, height: 200, series: series,
              axes: [{}, { size: 50, label: "containers" }], scales: { y: { range: [0, null] } } },
            [data.times].concat(names.map(function (n) { return data.series[n]; })), el);
})();
