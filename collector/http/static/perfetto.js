// Out of the view: the selection as a file (Chrome JSON or a Perfetto trace, from /snapshot, or an opened incident's
// from /incidents/{id}; `source(format)` says which path), or handed to Perfetto
// UI in a window of its own through the postMessage handshake it documents (open it, PING until it answers PONG,
// then post the trace). Perfetto UI is the one place the page sends anything else, and only when asked.

import { get } from "./api.js";

const PERFETTO_ORIGIN = "https://ui.perfetto.dev";

export async function download(source, format) {
  const response = await get(source(format));
  const blob = await response.blob();
  const url = URL.createObjectURL(blob);
  const link = document.createElement("a");
  link.href = url;
  link.download = `ringtrace-${stamp()}.${format === "chrome" ? "json" : "perfetto-trace"}`;
  document.body.append(link);
  link.click();
  link.remove();
  setTimeout(() => URL.revokeObjectURL(url), 10_000);
}

export async function openInPerfetto(source, setStatus) {
  // The window is opened on the click itself (a popup opened later, after the fetch, would be blocked).
  const win = window.open(PERFETTO_ORIGIN);
  if (!win) {
    setStatus("the browser blocked the Perfetto UI window: allow pop-ups for this page");
    return;
  }
  const buffer = await (await get(source("perfetto"))).arrayBuffer();
  await new Promise((resolve, reject) => {
    let tries = 0;
    const onMessage = (event) => {
      if (event.source !== win || event.data !== "PONG") return;
      clearInterval(timer);
      window.removeEventListener("message", onMessage);
      resolve();
    };
    const timer = setInterval(() => {
      if (++tries > 60 || win.closed) {  // 30 s
        clearInterval(timer);
        window.removeEventListener("message", onMessage);
        reject(new Error("Perfetto UI did not answer (it needs internet)"));
        return;
      }
      win.postMessage("PING", PERFETTO_ORIGIN);
    }, 500);
    window.addEventListener("message", onMessage);
  });
  win.postMessage({ perfetto: { buffer, title: `ringtrace ${stamp()}`, fileName: `ringtrace-${stamp()}.perfetto-trace` } },
    PERFETTO_ORIGIN, [buffer]);
}

function stamp() {
  return new Date().toISOString().replace(/[:]/g, "-").replace(/\..*/, "");
}
