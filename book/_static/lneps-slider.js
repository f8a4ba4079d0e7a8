// Chapter 1's "Try it" slider (lneps.book.slider inlines this file into the notebook's output).
// It looks values up and draws bars; it normalizes nothing: every normalized value was
// computed by lneps.layer_norm and is embedded in the block as JSON.
(function () {
  function setUp(root) {
    if (root.getAttribute("data-ready")) { return; }
    var D = JSON.parse(root.querySelector("script[data-role=data]").textContent);
    function part(sel) { return root.querySelector(sel); }
    var kIn = part("input[data-role=k]"), cIn = part("input[data-role=c]");
    var kOut = part("output[data-role=k-value]"), cOut = part("output[data-role=c-value]");
    function show(x) { return String(Math.round(x * 100) / 100); }
    // The value axis: a tick label and a grid line at each tick, on a fixed scale.
    function axis(panel, ax) {
      var labels = root.querySelector("[data-role=" + panel + "] .lneps-axis");
      var bars = root.querySelector("[data-role=" + panel + "] .lneps-bars");
      ax.ticks.forEach(function (t) {
        var top = (50 - 50 * t / ax.max) + "%";
        var label = document.createElement("span");
        label.className = "lneps-tick";
        label.style.top = top;
        label.textContent = String(t);
        labels.appendChild(label);
        var line = document.createElement("div");
        line.className = t === 0 ? "lneps-grid lneps-zero" : "lneps-grid";
        line.style.top = top;
        bars.insertBefore(line, bars.firstChild);
      });
    }
    function draw(panel, values, max, fmt) {
      var bars = root.querySelectorAll("[data-role=" + panel + "] .lneps-bar");
      var vals = root.querySelectorAll("[data-role=" + panel + "] .lneps-val");
      for (var i = 0; i < values.length; i++) {
        var h = Math.min(Math.abs(values[i]) / max, 1) * 50;
        bars[i].style.height = h + "%";
        bars[i].style.top = (values[i] >= 0 ? 50 - h : 50) + "%";
        vals[i].textContent = fmt(values[i]);
      }
    }
    function update() {
      var i = Math.round((parseFloat(kIn.value) - D.k[0]) / D.kstep);
      var j = Math.round((parseFloat(cIn.value) - D.c[0]) / D.cstep);
      i = Math.max(0, Math.min(D.nk - 1, i)); j = Math.max(0, Math.min(D.nc - 1, j));
      var k = D.k[0] + i * D.kstep, c = D.c[0] + j * D.cstep, d = D.token.length;
      var x = D.token.map(function (t) { return k * t + c; });
      var y = D.y.slice((i * D.nc + j) * d, (i * D.nc + j + 1) * d);
      kOut.textContent = show(k); cOut.textContent = show(c);
      root.setAttribute("data-k", String(k)); root.setAttribute("data-c", String(c));
      draw("token", x, D.xaxis.max, show);
      draw("normalized", y, D.yaxis.max, function (v) { return v.toFixed(D.digits); });
    }
    axis("token", D.xaxis);
    axis("normalized", D.yaxis);
    kIn.addEventListener("input", update); cIn.addEventListener("input", update);
    var nojs = part("[data-role=nojs]");
    if (nojs) { nojs.parentNode.removeChild(nojs); }
    root.setAttribute("data-ready", "1");
    update();
  }
  var blocks = document.querySelectorAll(".lneps-slider");
  for (var b = 0; b < blocks.length; b++) { setUp(blocks[b]); }
})();
