/* lrcheck report.html: interactive plots of the whole per-update traces, drawn with uPlot.
 *
 * The page carries every update's value packed by lrcheck/reports/series.py (float32 bits,
 * differenced, zigzag, byte planes, deflate, base64); this unpacks them with the browser's own
 * DecompressionStream. Without JavaScript, or where that is missing, each figure keeps its
 * static picture. Zoom: drag across a plot (double-click: the whole run); the buttons and the
 * first-divergence links zoom to an update; hovering reads update k's values in both runs and
 * their difference into the line under the plot. */
(function () {
  "use strict";
  var source = document.getElementById("lrcheck-data");
  if (!source || typeof uPlot === "undefined") return;
  var page = JSON.parse(source.textContent);
  var charts = {};

  function inflate(b64) {
    var text = atob(b64), bytes = new Uint8Array(text.length);
    for (var i = 0; i < text.length; i++) bytes[i] = text.charCodeAt(i);
    var stream = new Blob([bytes]).stream().pipeThrough(new DecompressionStream("deflate"));
    return new Response(stream).arrayBuffer().then(function (b) { return new Uint8Array(b); });
  }

  function unpack(packed, base) {
    return inflate(packed.data).then(function (raw) {
      var n = packed.n, ints = new Int32Array(n), i, k;
      for (i = 0; i < n; i++) {
        var z = (raw[i] | raw[n + i] << 8 | raw[2 * n + i] << 16 | raw[3 * n + i] << 24) >>> 0;
        ints[i] = (z >>> 1) ^ -(z & 1);
      }
      for (k = 0; k < packed.order; k++) {
        var acc = 0;
        for (i = 0; i < n; i++) { acc = (acc + ints[i]) | 0; ints[i] = acc; }
      }
      if (packed.base) {
        var b = new Int32Array(base.buffer);
        for (i = 0; i < n; i++) ints[i] = (ints[i] + b[i]) | 0;
      }
      return new Float32Array(ints.buffer);
    });
  }

  /* The shortest decimal that reads back as the same float32. */
  function fmt(v) {
    if (v == null || isNaN(v)) return "—";
    if (v === 0) return "0";
    for (var p = 1; p < 9; p++) {
      var s = v.toPrecision(p);
      if (Math.fround(parseFloat(s)) === v) return String(parseFloat(s));
    }
    return v.toPrecision(9);
  }

  function column(values, n) {
    var out = new Array(n);
    for (var i = 0; i < n; i++) {
      var v = i < values.length ? values[i] : NaN;
      out[i] = isNaN(v) ? null : v;
    }
    return out;
  }

  function colour(name) {
    return getComputedStyle(document.documentElement).getPropertyValue("--" + name).trim();
  }

  function axis(label, size) {
    return {stroke: colour("fg"), label: label, labelSize: 18, size: size,
            grid: {stroke: colour("grid"), width: 1}, ticks: {stroke: colour("grid")},
            values: function (u, vals) { return vals.map(function (v) { return fmt(Math.fround(v)); }); }};
  }

  function marker(k) {
    return function (u) {
      if (k == null) return;
      var x = Math.round(u.valToPos(k, "x", true)), ctx = u.ctx;
      if (x < u.bbox.left || x > u.bbox.left + u.bbox.width) return;
      ctx.save();
      ctx.strokeStyle = colour("diff");
      ctx.setLineDash([4, 4]);
      ctx.lineWidth = 1.5 * devicePixelRatio;
      ctx.beginPath();
      ctx.moveTo(x, u.bbox.top);
      ctx.lineTo(x, u.bbox.top + u.bbox.height);
      ctx.stroke();
      ctx.restore();
    };
  }

  function build(spec, values) {
    var fig = document.getElementById("plot-" + spec.id);
    var box = fig.querySelector(".live");
    var readout = fig.querySelector(".readout");
    var n = spec.n, xs = new Array(n);
    for (var i = 0; i < n; i++) xs[i] = i;
    var data = {
      main: [xs, column(values.ref, n), column(values.cand, n)],
      diff: [xs, column(values.diff, n)],
    };
    var state = {spec: spec, plots: [], syncing: false};

    function show(idx) {
      if (idx == null) return;
      var r = data.main[1][idx], c = data.main[2][idx], d = data.diff[1][idx];
      readout.dataset.k = idx;
      readout.dataset.ref = r == null ? "" : r;
      readout.dataset.cand = c == null ? "" : c;
      readout.dataset.diff = d == null ? "" : d;
      readout.textContent = "update " + idx + ": reference " + fmt(r) + " · candidate " +
        fmt(c) + " · " + spec.diff_label + " " + fmt(d);
    }

    function sync(u) {
      fig.dataset.xmin = u.scales.x.min;  /* the zoomed range, readable by tests */
      fig.dataset.xmax = u.scales.x.max;
      if (state.syncing) return;
      state.syncing = true;
      var min = u.scales.x.min, max = u.scales.x.max;
      state.plots.forEach(function (p) {
        if (p !== u && (p.scales.x.min !== min || p.scales.x.max !== max))
          p.setScale("x", {min: min, max: max});
      });
      state.syncing = false;
    }

    function make(series, rows, label, height, target, range) {
      var width = Math.max(320, box.clientWidth || 800);
      var opts = {
        width: width, height: height,
        scales: {x: {time: false}},
        series: [{label: "update", value: function (u, v) { return v == null ? "—" : v; }}]
          .concat(series),
        axes: [axis("optimizer update", 44), axis(label, 64)],
        cursor: {sync: {key: "lrcheck-" + spec.id}, drag: {x: true, y: false},
                 points: {size: 7}},
        legend: {live: true},
        hooks: {setCursor: [function (u) { show(u.cursor.idx); }], draw: [marker(spec.divergence)],
                setScale: [function (u, key) { if (key === "x") sync(u); }]},
      };
      var plot = new uPlot(opts, rows, target);
      if (range) plot.setScale("x", range);
      return plot;
    }

    function draw(range) {
      box.textContent = "";
      var top = document.createElement("div"), bottom = document.createElement("div");
      box.appendChild(top);
      box.appendChild(bottom);
      var line = function (name, dash) {
        return {label: name, stroke: colour(name === "reference" ? "ref" : "cand"),
                width: 1.5, dash: dash, value: function (u, v) { return fmt(v); }};
      };
      state.plots = [
        make([line("reference"), line("candidate", [6, 4])], data.main, spec.ylabel, 300, top, range),
        make([{label: spec.diff_label, stroke: colour("diff"), width: 1.5,
               value: function (u, v) { return fmt(v); }}], data.diff, spec.diff_label, 170, bottom, range),
      ];
    }

    state.goto = function (k) {
      var w = Math.max(20, Math.ceil(n / 5000));
      state.plots[0].setScale("x", {min: Math.max(0, k - w), max: Math.min(n - 1, k + w)});
      var main = state.plots[0];
      main.setCursor({left: main.valToPos(k, "x"), top: main.bbox.height / devicePixelRatio / 2});
      show(k);
    };
    state.reset = function () { state.plots[0].setScale("x", {min: 0, max: n - 1}); };
    state.redraw = function () {
      var x = state.plots[0].scales.x;
      state.plots.forEach(function (p) { p.destroy(); });
      draw({min: x.min, max: x.max});
    };
    state.resize = function () {
      var width = Math.max(320, box.clientWidth);
      state.plots.forEach(function (p) { p.setSize({width: width, height: p.height}); });
    };
    draw(null);
    fig.classList.add("is-live");
    charts[spec.id] = state;
  }

  function start(spec) {
    return unpack(spec.ref).then(function (ref) {
      return Promise.all([unpack(spec.cand, ref), unpack(spec.diff)]).then(function (rest) {
        build(spec, {ref: ref, cand: rest[0], diff: rest[1]});
      });
    });
  }

  document.addEventListener("click", function (event) {
    var link = event.target.closest("[data-goto]");
    if (!link) return;
    var chart = charts[link.dataset.goto];
    if (!chart) return;  /* not drawn: the link still scrolls to the static picture */
    if (link.dataset.k === "all") chart.reset(); else chart.goto(Number(link.dataset.k));
  });

  if (typeof DecompressionStream === "undefined") {
    document.documentElement.classList.add("no-live");
    return;
  }
  var ready = Promise.all(page.plots.map(start)).then(function () {
    document.documentElement.dataset.plots = "ready";
    if (location.hash.indexOf("#update-") === 0) {
      var parts = location.hash.slice(8).split("-");
      if (charts[parts[1] || "lr"]) charts[parts[1] || "lr"].goto(Number(parts[0]));
    }
  });
  ready.catch(function (error) {
    document.documentElement.dataset.plots = "failed: " + error;
  });
  window.matchMedia("(prefers-color-scheme: dark)").addEventListener("change", function () {
    Object.keys(charts).forEach(function (id) { charts[id].redraw(); });
  });
  var pending = null;
  window.addEventListener("resize", function () {
    clearTimeout(pending);
    pending = setTimeout(function () {
      Object.keys(charts).forEach(function (id) { charts[id].resize(); });
    }, 100);
  });
})();
