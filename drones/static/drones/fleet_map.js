// The console's fleet map: Leaflet (shipped as static files), refreshed from the admin's JSON.
// With no tile server configured (the default: nothing is asked of the internet), or one it cannot
// reach (a closed network), it draws a plain grid; a scale says the distances either way.
(function () {
  "use strict";
  var element = document.getElementById("fleet-map");
  var COLOURS = { available: "#2e8b57", reserved: "#e6a700", in_flight: "#1f6fd1", returning: "#8e44ad", maintenance: "#7f8c8d" };
  var map = L.map(element, { preferCanvas: false });
  var tiles = element.dataset.tiles;
  var grid = L.layerGroup().addTo(map);
  if (tiles) {
    var tileLayer = L.tileLayer(tiles, { maxZoom: 19, attribution: element.dataset.attribution }).addTo(map);
    tileLayer.on("tileerror", function () {  // the tile server is out of reach: the grid instead
      if (!tiles) { return; }
      tiles = "";
      map.removeLayer(tileLayer);
      element.dataset.fallback = "grid";
      drawGrid();
    });
  }
  var layers = L.layerGroup().addTo(map);
  L.control.scale({ imperial: false }).addTo(map);  // distances read off the map, tiles or not
  // The view follows what is drawn (every drone, flight and waiting ring) until the operator moves it.
  var moved = false;
  ["mousedown", "wheel", "touchstart", "keydown"].forEach(function (name) {
    element.addEventListener(name, function () { moved = true; }, { passive: true });
  });

  function drawGrid() {
    // Without tiles: a line every 0.01 degree (about a kilometre) around what is shown.
    grid.clearLayers();
    if (tiles) { return; }
    var b = map.getBounds(), step = 0.01;
    for (var lat = Math.floor(b.getSouth() / step) * step; lat <= b.getNorth(); lat += step) {
      L.polyline([[lat, b.getWest()], [lat, b.getEast()]], { color: "#d5dde5", weight: 1, interactive: false, className: "grid-line" }).addTo(grid);
    }
    for (var lon = Math.floor(b.getWest() / step) * step; lon <= b.getEast(); lon += step) {
      L.polyline([[b.getSouth(), lon], [b.getNorth(), lon]], { color: "#d5dde5", weight: 1, interactive: false, className: "grid-line" }).addTo(grid);
    }
  }

  function draw(data) {
    layers.clearLayers();
    var points = [], counts = {};
    data.flights.forEach(function (f) {
      var mine = f[0] === element.dataset.delivery;
      L.polyline([f[1], f[2]], { color: mine ? "#c0392b" : "#1f6fd1", weight: mine ? 5 : 2, opacity: 0.7, className: mine ? "route route-selected" : "route" })
        .bindTooltip("delivery " + f[0]).addTo(layers);
      if (mine || !element.dataset.delivery) { points.push(f[1], f[2]); }
    });
    data.waiting.forEach(function (w) {
      var minutes = w[3] / 60, mine = w[0] === element.dataset.delivery;
      L.circleMarker([w[1], w[2]], { radius: Math.min(18, 5 + Math.sqrt(minutes) * 3), color: "#c0392b", weight: mine ? 4 : 1, fillOpacity: 0.25, className: "waiting" })
        .bindTooltip("waiting " + Math.round(minutes) + " min: delivery " + w[0]).addTo(layers);
      if (mine || !element.dataset.delivery) { points.push([w[1], w[2]]); }
    });
    data.drones.forEach(function (d) {
      counts[d[2]] = (counts[d[2]] || 0) + 1;
      var marker = L.circleMarker([d[3], d[4]], { radius: 6, color: "#1f3347", weight: 1, fillColor: COLOURS[d[2]] || "#000", fillOpacity: 0.9, className: "drone drone-" + d[2] });
      var link = document.createElement("a"), popup = document.createElement("span");
      link.href = element.dataset.droneUrl.replace("00000000-0000-0000-0000-000000000000", d[0]);
      link.textContent = d[1];
      popup.appendChild(link);
      popup.appendChild(document.createTextNode(" (" + d[2].replace("_", " ") + ")"));
      marker.bindPopup(popup);
      marker.addTo(layers);
      if (!element.dataset.delivery) { points.push([d[3], d[4]]); }
    });
    var said = Object.keys(counts).sort().map(function (k) { return counts[k] + " " + k.replace("_", " "); });
    said.push(data.waiting.length + " " + (data.waiting.length === 1 ? "delivery" : "deliveries") + " waiting for a drone");
    document.getElementById("fleet-counts").textContent = said.join(", ") + (data.truncated ? " (the first " + data.drones.length + " drones drawn)" : "");
    if (!moved && points.length) { map.fitBounds(points, { padding: [30, 30], maxZoom: 15, animate: false }); }
    element.dataset.drawn = String(data.drones.length);
  }

  function refresh() {
    fetch(element.dataset.source, { credentials: "same-origin" })
      .then(function (r) { return r.json(); })
      .then(draw)
      .catch(function () {})
      .then(function () { setTimeout(refresh, Number(element.dataset.refresh)); });
  }
  map.setView([0, 0], 2);
  map.on("moveend", drawGrid);
  refresh();
})();
