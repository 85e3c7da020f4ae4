// The event browser's live tail: follows the stream over the WebSocket tail read
// (/ws/streams/<scope>/<stream>?from=tail, signed in by the session) and shows the newest
// events. It keeps up with fast streams by rendering at most once per animation frame, only
// the newest MAX_ROWS events, so the page stays responsive whatever the rate. Pause keeps
// counting and keeps the newest events; resume shows them.
(function () {
  var MAX_ROWS = 500;
  var script = document.getElementById("tail-script");
  var rows = document.getElementById("tail-rows");
  var start = document.getElementById("tail-start");
  var pause = document.getElementById("tail-pause");
  var status = document.getElementById("tail-status");
  var countEl = document.getElementById("tail-count");
  var rateEl = document.getElementById("tail-rate");
  document.getElementById("tail-max").textContent = MAX_ROWS;
  var view = script.dataset.view;
  var ws = null, paused = false, pending = [], received = 0, scheduled = false;
  var windowStart = performance.now(), windowCount = 0;

  function shown(event) {
    if (event.parts !== undefined) {
      return "(an event of " + event.size.toLocaleString() + " bytes, too large for one message: " +
        "see it in the event browser)";
    }
    if (view === "schema") {
      if (event.value !== undefined) {
        return "schema " + event.schemaId + ": " + JSON.stringify(event.value, null, 2);
      }
      return "(not decoded: " + event.decodeError + ")";
    }
    if (event.text === undefined) return "(binary) " + event.data;
    if (view === "hex") {
      return Array.from(new TextEncoder().encode(event.text), function (b) {
        return b.toString(16).padStart(2, "0");
      }).join(" ");
    }
    return event.text;
  }
  function render() {
    scheduled = false;
    if (paused || !pending.length) return;
    var batch = pending.length > MAX_ROWS ? pending.slice(pending.length - MAX_ROWS) : pending;
    pending = [];
    var fragment = document.createDocumentFragment();
    for (var i = batch.length - 1; i >= 0; i--) {  // newest first
      var tr = document.createElement("tr");
      var item = batch[i];
      [item[0], item[1].offset, shown(item[1])].forEach(function (value, column) {
        var td = document.createElement("td");
        if (column === 2) {
          var pre = document.createElement("pre");
          pre.className = "event";
          pre.textContent = value;
          td.appendChild(pre);
        } else {
          td.textContent = value;
        }
        tr.appendChild(td);
      });
      fragment.appendChild(tr);
    }
    rows.insertBefore(fragment, rows.firstChild);
    while (rows.childElementCount > MAX_ROWS) rows.removeChild(rows.lastChild);
    countEl.textContent = received.toLocaleString();
  }
  function schedule() {
    if (!scheduled) { scheduled = true; requestAnimationFrame(render); }
  }
  function onMessage(message) {
    var data = JSON.parse(message.data);
    if (data.type === "events") {
      // An event too large for one message comes in parts: one row (and count) for its first.
      var events = data.events.filter(function (e) { return !e.part; });
      for (var i = 0; i < events.length; i++) pending.push([data.segmentId, events[i]]);
      if (pending.length > 4 * MAX_ROWS) pending = pending.slice(pending.length - MAX_ROWS);
      received += events.length;
      windowCount += events.length;
      if (paused) countEl.textContent = received.toLocaleString();
      schedule();
    } else if (data.type === "subscribed") {
      status.textContent = "following";
    } else if (data.type === "error") {
      status.textContent = data.code + ": " + data.message;
    }
  }
  function follow() {
    var scheme = location.protocol === "https:" ? "wss://" : "ws://";
    ws = new WebSocket(scheme + location.host + script.dataset.url + "?from=tail&encoding=utf-8" +
      (view === "schema" ? "&decode=json" : ""));
    ws.onmessage = onMessage;
    ws.onclose = function (e) {
      if (status.textContent === "following" || status.textContent === "connecting") {
        status.textContent = "stopped (" + e.code + ")";
      }
      start.disabled = false; pause.disabled = true;
    };
    status.textContent = "connecting";
    start.disabled = true; pause.disabled = false;
  }
  setInterval(function () {
    var now = performance.now();
    rateEl.textContent = Math.round(windowCount * 1000 / (now - windowStart)).toLocaleString();
    windowStart = now; windowCount = 0;
  }, 1000);
  start.addEventListener("click", follow);
  pause.addEventListener("click", function () {
    paused = !paused;
    pause.textContent = paused ? "Resume" : "Pause";
    status.textContent = paused ? "paused (still receiving)" : "following";
    if (!paused) schedule();
  });
  if (script.dataset.autostart) follow();
})();
