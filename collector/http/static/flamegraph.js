// The flame graph of the samples a window selects (the collector's /flamegraph document): the callers on top, each
// frame as wide as the samples whose stack goes through it, its callees below it. Drawn as SVG, no library.
// Clicking a frame zooms to it (it takes the whole width); clicking the root ("all") zooms back out.

const SVG = "http://www.w3.org/2000/svg";
const ROW_PX = 18;
const MIN_PX = 0.5;  // frames narrower than this are not drawn (their samples still count in their callers)
const CHAR_PX = 7;  // about one character of the label's font: a label shows as much of its name as fits

// The document's nodes as a tree: node 0 is the root ("all"), each other node's children in the order first seen.
export function buildTree(doc) {
  const n = doc.nodes;
  const nodes = [{ id: 0, name: "all", file: "", line: 0, self: 0, total: doc.samples, depth: 0, children: [] }];
  for (let i = 0; i < n.function.length; i++) {
    const parent = nodes[n.parent[i]];
    const node = {
      id: i + 1, name: n.function[i], file: n.file[i], line: n.line[i], self: n.self[i], total: n.total[i],
      depth: parent.depth + 1, parent, children: [],
    };
    nodes.push(node);
    parent.children.push(node);
  }
  return nodes;
}

// A warm colour per function name, the same on every draw.
function colour(name) {
  let hash = 0;
  for (let i = 0; i < name.length; i++) hash = (hash * 31 + name.charCodeAt(i)) | 0;
  const hue = 10 + (Math.abs(hash) % 45);
  const light = 55 + (Math.abs(hash >> 8) % 15);
  return `hsl(${hue}, 85%, ${light}%)`;
}

export class FlameGraph {
  constructor(svg, tooltip, wrap) {
    this.svg = svg;
    this.tooltip = tooltip;
    this.wrap = wrap;
    this.nodes = [];
    this.focus = null;
    svg.addEventListener("click", (event) => {
      const id = event.target.closest("g[data-node]")?.dataset.node;
      if (id === undefined) return;
      const node = this.nodes[Number(id)];
      this.focus = node.id === 0 ? null : node;
      this.draw();
    });
    svg.addEventListener("mousemove", (event) => this.hover(event));
    svg.addEventListener("mouseleave", () => { this.tooltip.hidden = true; });
  }

  // A new document: the zoom is kept if the frame zoomed to is still there (the same stack from the root).
  setDocument(doc) {
    const path = [];
    for (let node = this.focus; node && node.id !== 0; node = node.parent) path.unshift(node.name + "|" + node.file);
    this.nodes = buildTree(doc);
    this.focus = null;
    let node = this.nodes[0];
    for (const step of path) {
      node = node.children.find((child) => child.name + "|" + child.file === step);
      if (!node) break;
      this.focus = node;
    }
    this.draw();
  }

  draw() {
    const svg = this.svg;
    const width = Math.max(this.wrap.clientWidth, 100);
    const root = this.nodes[0];
    const focus = this.focus || root;
    const frames = [];
    // The callers of the zoomed-to frame take the whole width above it; its callees share it by their samples.
    const callers = [];
    for (let node = focus.parent; node; node = node.parent) callers.unshift(node);
    callers.forEach((node, depth) => frames.push({ node, x: 0, w: width, depth }));
    const place = (node, x, w, depth) => {
      frames.push({ node, x, w, depth });
      let at = x;
      for (const child of node.children) {
        const cw = focus.total ? (child.total / focus.total) * width : 0;
        if (cw >= MIN_PX) place(child, at, cw, depth + 1);
        at += cw;
      }
    };
    if (root.total) place(focus, 0, width, callers.length);
    const depth = frames.reduce((deepest, f) => Math.max(deepest, f.depth), 0);
    svg.setAttribute("width", String(width));
    svg.setAttribute("height", String(root.total ? (depth + 1) * ROW_PX : 0));
    // (One by one into a fragment: a call takes at most about 120,000 arguments, and a document may hold 200,000.)
    const drawn = document.createDocumentFragment();
    for (const f of frames) drawn.append(this.frame(f));
    svg.replaceChildren(drawn);
    svg.dataset.frames = String(frames.length);
  }

  frame({ node, x, w, depth }) {
    const g = document.createElementNS(SVG, "g");
    g.dataset.node = String(node.id);
    g.dataset.name = node.name;
    const rect = document.createElementNS(SVG, "rect");
    Object.entries({ x, y: depth * ROW_PX, width: Math.max(w - 0.5, 0.5), height: ROW_PX - 1, rx: 2 })
      .forEach(([k, v]) => rect.setAttribute(k, String(v)));
    rect.setAttribute("fill", node.id === 0 ? "#c9d1e0" : colour(node.name));
    g.append(rect);
    const fits = Math.floor((w - 6) / CHAR_PX);
    if (fits >= 3) {
      const text = document.createElementNS(SVG, "text");
      text.setAttribute("x", String(x + 3));
      text.setAttribute("y", String(depth * ROW_PX + ROW_PX - 5));
      text.textContent = node.name.length <= fits ? node.name : node.name.slice(0, fits - 1) + "…";
      g.append(text);
    }
    return g;
  }

  hover(event) {
    const id = event.target.closest("g[data-node]")?.dataset.node;
    if (id === undefined) { this.tooltip.hidden = true; return; }
    const node = this.nodes[Number(id)];
    const root = this.nodes[0];
    const share = root.total ? ((100 * node.total) / root.total).toFixed(1) : "0";
    const name = Object.assign(document.createElement("div"), { className: "name", textContent: node.name });
    const where = node.id === 0 ? "every sample" : `${node.file}:${node.line}`;
    const meta = Object.assign(document.createElement("div"), {
      className: "meta",
      textContent: `${where} · ${node.total} samples (${share}%) · ${node.self} in it, not in a callee`,
    });
    this.tooltip.replaceChildren(name, meta);
    const box = this.wrap.getBoundingClientRect();
    this.tooltip.style.left = `${Math.min(event.clientX - box.left + 12, box.width - 300)}px`;
    this.tooltip.style.top = `${event.clientY - box.top + this.wrap.scrollTop + 14}px`;
    this.tooltip.hidden = false;
  }
}
