// The book's interactive figures (devplace_course.interactive): controls select one of the
// frames the library computed when the chapter ran, and the frame is drawn as plain SVG. Nothing is
// computed here: every number shown comes from the frame. Defined once per page, however many
// figures it holds.
(function () {
  if (window.dlFigure) return;
  const SVG = "http://www.w3.org/2000/svg";
  const W = 680, LEFT = 78, RIGHT = 12, TITLE = 18, AXIS = 30;

  function el(tag, attrs, parent, text) {
    const e = document.createElementNS(SVG, tag);
    for (const [k, v] of Object.entries(attrs || {})) e.setAttribute(k, v);
    if (text !== undefined) e.textContent = text;
    if (parent) parent.appendChild(e);
    return e;
  }

  // about n round ticks over [lo, hi]
  function ticks(lo, hi, n) {
    if (!(hi > lo)) return [lo];
    const raw = (hi - lo) / n, mag = Math.pow(10, Math.floor(Math.log10(raw)));
    const step = [1, 2, 5, 10].map(f => f * mag).find(s => s >= raw);
    const out = [];
    for (let t = Math.ceil(lo / step) * step; t <= hi + 1e-9 * step; t += step) out.push(+t.toPrecision(12));
    return out;
  }

  function drawPanel(svg, p, top, height, uid) {
    const g = el("g", {"class": "dl-panel"}, svg);
    const x0 = LEFT, x1 = W - RIGHT, y0 = top + TITLE, y1 = top + TITLE + height;
    const sx = v => x0 + (v - p.x[0]) / ((p.x[1] - p.x[0]) || 1) * (x1 - x0);
    const sy = v => y1 - (v - p.y[0]) / ((p.y[1] - p.y[0]) || 1) * (y1 - y0);
    if (p.title) el("text", {x: x0, y: top + 13, "class": "dl-title"}, g, p.title);
    el("rect", {x: x0, y: y0, width: x1 - x0, height: y1 - y0, "class": "dl-frame"}, g);
    if (![p.rects, p.lines, p.dots, p.segs].some(a => a && a.length)) {
      el("text", {x: (x0 + x1) / 2, y: (y0 + y1) / 2, "text-anchor": "middle"}, g, "nothing to draw at this setting (see below)");
      return;
    }
    for (const [t, label] of p.xticks || ticks(p.x[0], p.x[1], 8).map(t => [t, String(t)])) {
      el("line", {x1: sx(t), x2: sx(t), y1: y1, y2: y1 + 4, "class": "dl-tick"}, g);
      el("text", {x: sx(t), y: y1 + 15, "text-anchor": "middle"}, g, label);
    }
    if (p.xlabel) el("text", {x: (x0 + x1) / 2, y: y1 + 28, "text-anchor": "middle"}, g, p.xlabel);
    for (const [v, label] of p.yticks || ticks(p.y[0], p.y[1], 4).map(t => [t, String(t)])) {
      el("line", {x1: x0 - 4, x2: x0, y1: sy(v), y2: sy(v), "class": "dl-tick"}, g);
      el("text", {x: x0 - 6, y: sy(v) + 4, "text-anchor": "end"}, g, label);
    }
    if (p.ylabel) el("text", {x: 12, y: (y0 + y1) / 2, "text-anchor": "middle",
                              transform: `rotate(-90 12 ${(y0 + y1) / 2})`}, g, p.ylabel);
    for (const [a, b, c, d] of p.segs || [])
      el("line", {x1: sx(a), y1: sy(b), x2: sx(c), y2: sy(d), "class": "dl-seg"}, g);
    for (const [x, y, w, h, fill, label, hatch] of p.rects || []) {
      const r = {x: sx(x), y: sy(y + h), width: Math.max(sx(x + w) - sx(x), 0.5), height: Math.max(sy(y) - sy(y + h), 0.5)};
      el("rect", {...r, fill: hatch ? `url(#${uid}-hatch)` : fill, "class": hatch ? "dl-hatch" : "dl-box"}, g);
      if (label && r.width > 6.2 * label.length + 4 && r.height > 10)
        el("text", {x: r.x + r.width / 2, y: r.y + r.height / 2 + 4, "text-anchor": "middle", "class": "dl-label"}, g, label);
    }
    for (const [color, xs, ys, label] of p.lines || []) {
      el("polyline", {points: xs.map((x, i) => `${sx(x)},${sy(ys[i])}`).join(" "), stroke: color,
                      "class": "dl-line"}, g);
      if (label) el("text", {x: sx(xs[xs.length - 1]) - 2, y: sy(ys[ys.length - 1]) - 4, "text-anchor": "end",
                             fill: color, "class": "dl-label"}, g, label);
    }
    for (const [x, y, fill, label] of p.dots || []) {
      el("circle", {cx: sx(x), cy: sy(y), r: 7, fill: fill, "class": "dl-dot"}, g);
      if (label) el("text", {x: sx(x), y: sy(y) - 10, "text-anchor": "middle", "class": "dl-label"}, g, label);
    }
  }

  function render(root, spec) {
    const key = spec.controls.map(c => root.querySelector(`#${spec.id}-${c.name}`).value).join("|");
    for (const c of spec.controls) {
      const input = root.querySelector(`#${spec.id}-${c.name}`);
      if (input.type === "range") root.querySelector(`#${spec.id}-${c.name}-value`).textContent = c.labels[+input.value];
    }
    const frame = spec.frames[key];
    const svg = root.querySelector("svg");
    svg.textContent = "";
    const defs = el("defs", {}, svg);
    const pat = el("pattern", {id: `${spec.id}-hatch`, width: 6, height: 6, patternUnits: "userSpaceOnUse",
                               patternTransform: "rotate(45)"}, defs);
    el("line", {x1: 0, y1: 0, x2: 0, y2: 6, stroke: "#000", "stroke-width": 1.2}, pat);
    let top = 0;
    frame.panels.forEach((p, i) => {
      const h = spec.heights[i];
      drawPanel(svg, p, top, h, spec.id);
      top += TITLE + h + AXIS + 8;
    });
    svg.setAttribute("viewBox", `0 0 ${W} ${top}`);
    svg.setAttribute("aria-label", frame.title);
    root.querySelector(".dl-caption").textContent = frame.title;
    root.dataset.key = key;
    const out = root.querySelector(".dl-readout");
    out.textContent = "";
    for (const [k, label, value, text] of frame.readout) {
      const span = document.createElement("span");
      span.textContent = label + ": ";
      const o = document.createElement("output");
      o.dataset.key = k;
      o.dataset.value = value;
      o.textContent = text;
      span.appendChild(o);
      out.appendChild(span);
    }
  }

  window.dlFigure = function (root) {
    if (root.dataset.ready) return;
    root.dataset.ready = "1";
    const spec = JSON.parse(root.querySelector('script[type="application/json"]').textContent);
    for (const still of root.querySelectorAll("img.dl-static")) still.remove();  // the SVG draws it now
    const form = root.querySelector(".dl-controls");
    for (const c of spec.controls) {
      const id = `${spec.id}-${c.name}`;
      const wrap = document.createElement("span");
      const label = document.createElement("label");
      label.htmlFor = id;
      label.textContent = c.label + " ";
      wrap.appendChild(label);
      let input;
      if (c.kind === "select") {
        input = document.createElement("select");
        c.labels.forEach((l, i) => { const o = document.createElement("option"); o.value = i; o.textContent = l; input.appendChild(o); });
      } else {
        input = document.createElement("input");
        Object.assign(input, {type: "range", min: 0, max: c.labels.length - 1, step: 1});
      }
      input.id = id;
      wrap.appendChild(input);
      if (c.kind !== "select") {
        const shown = document.createElement("output");
        shown.id = `${id}-value`;
        shown.htmlFor = id;
        wrap.appendChild(shown);
      }
      form.appendChild(wrap);
      input.value = c.default;
      input.addEventListener("input", () => render(root, spec));
      input.addEventListener("change", () => render(root, spec));
    }
    render(root, spec);
  };
  const style = document.createElement("style");
  style.textContent = `
    div.dl-figure { margin: 0.5rem 0 1rem; }
    div.dl-figure .dl-controls span { display: inline-block; margin: 0 1.2rem 0.3rem 0; }
    div.dl-figure .dl-controls output { display: inline-block; min-width: 2.5em; margin-left: 0.3rem; }
    div.dl-figure svg { width: 100%; height: auto; display: block; font: 11px sans-serif; }
    div.dl-figure .dl-title { font-weight: bold; }
    div.dl-figure .dl-frame { fill: none; stroke: #999; stroke-width: 0.6; }
    div.dl-figure .dl-tick, div.dl-figure .dl-seg { stroke: #888; stroke-width: 0.8; }
    div.dl-figure .dl-box { stroke: #000; stroke-width: 0.4; }
    div.dl-figure .dl-hatch { stroke: none; }
    div.dl-figure .dl-dot { stroke: #000; stroke-width: 0.5; }
    div.dl-figure .dl-label { font-size: 9px; }
    div.dl-figure .dl-line { fill: none; stroke-width: 1.6; }
    div.dl-figure .dl-caption { margin: 0.2rem 0; font-size: 0.9rem; }
    div.dl-figure .dl-readout span { display: inline-block; margin-right: 1.2rem; }
    div.dl-figure .dl-legend span { display: inline-block; margin-right: 1rem; font-size: 0.85rem; }
    div.dl-figure .dl-legend i { display: inline-block; width: 0.8rem; height: 0.8rem; margin-right: 0.25rem;
                                 border: 1px solid #000; vertical-align: middle; }`;
  document.head.appendChild(style);
})();
