// Each line of a code block becomes its own box, indented as the code is, with a hanging indent:
// where a long line wraps (at the column's edge, on screen and on paper), the rest of it continues
// under the line's own indentation plus four columns, so Python's structure stays readable.
// Copying is unchanged: every box still ends with its newline.
document.addEventListener("DOMContentLoaded", () => {
  for (const pre of document.querySelectorAll("div.highlight pre, div.cell_output pre")) {
    const lines = [[]];
    for (const node of Array.from(pre.childNodes)) {
      const text = node.textContent;
      if (!text.includes("\n")) { lines[lines.length - 1].push(node); continue; }
      text.split("\n").forEach((part, i) => {
        if (i > 0) lines.push([]);
        if (!part) return;
        const piece = node.nodeType === Node.TEXT_NODE ? document.createTextNode(part) : node.cloneNode(false);
        if (piece.nodeType !== Node.TEXT_NODE) piece.textContent = part;
        lines[lines.length - 1].push(piece);
      });
    }
    if (lines.length && lines[lines.length - 1].length === 0) lines.pop();
    pre.textContent = "";
    for (const nodes of lines) {
      const box = document.createElement("span");
      box.className = "dl-line";
      const text = nodes.map(n => n.textContent).join("");
      const indent = (text.match(/^ */) || [""])[0].length + 4;
      box.style.paddingLeft = indent + "ch";
      box.style.textIndent = -indent + "ch";
      nodes.forEach(n => box.appendChild(n));
      box.appendChild(document.createTextNode("\n"));
      pre.appendChild(box);
    }
  }
});

// A results table (or a displayed formula) wider than its column is set in smaller type, down to
// 65 % of its size, until it fits (on screen at any window width; `devplace_course.book` calls it again at the printed page's
// width before printing the PDF). A table that still does not fit keeps scrolling in its box,
// and the rendered-book test reports it.
function devplaceFit() {
  for (const table of document.querySelectorAll("article table")) {
    const box = table.parentElement;
    for (const td of table.querySelectorAll("td")) {
      if (/^[\s\d.,:%×+\-−–/()<>=~≈]*$/.test(td.textContent) && /\d/.test(td.textContent)) td.classList.add("dl-number");
    }
    table.style.fontSize = "";
    if (!box || box.clientWidth === 0) continue;
    const full = parseFloat(getComputedStyle(table).fontSize);
    let size = full;
    while (table.getBoundingClientRect().width > box.clientWidth + 0.5 && size > 0.65 * full) {
      size *= 0.95;
      table.style.fontSize = size + "px";
    }
  }
  // a displayed formula wider than its column, likewise (MathJax sets its size as a percentage)
  for (const math of document.querySelectorAll('article mjx-container[display="true"]')) {
    if (math.dataset.dlSize === undefined) math.dataset.dlSize = math.style.fontSize || "100%";
    math.style.fontSize = math.dataset.dlSize;
    const full = parseFloat(math.dataset.dlSize);
    let size = full;
    while (math.scrollWidth > math.clientWidth + 1 && math.clientWidth > 0 && size > 0.65 * full) {
      size *= 0.95;
      math.style.fontSize = size + "%";
    }
  }
}
window.devplaceFit = devplaceFit;
window.addEventListener("load", () => {
  devplaceFit();
  if (window.MathJax && MathJax.startup && MathJax.startup.promise) MathJax.startup.promise.then(devplaceFit);
});
window.addEventListener("resize", devplaceFit);
