// Requests to the collector: always to the page's own origin, with the token (if the collector asked for one) as a
// Bearer header. The token lives in this tab's sessionStorage only: never in a URL, a cookie or a log.

const TOKEN_KEY = "ringtrace.token";
let asking = null;  // the one token prompt open, shared by every request that met a 401

export function token() {
  return sessionStorage.getItem(TOKEN_KEY) || "";
}

function headers() {
  const value = token();
  return value ? { Authorization: `Bearer ${value}` } : {};
}

// The token prompt: resolves once the user gave one (the request is then tried again).
function askForToken(refused) {
  if (asking) return asking;
  const dialog = document.getElementById("token-dialog");
  const input = document.getElementById("token");
  document.getElementById("token-error").hidden = !refused;
  input.value = "";
  asking = new Promise((resolve) => {
    dialog.addEventListener("close", () => {
      sessionStorage.setItem(TOKEN_KEY, input.value.trim());
      asking = null;
      resolve();
    }, { once: true });
  });
  dialog.showModal();
  input.focus();
  return asking;
}

// fetch, but a request that got no answer (the collector stopped, say) says so, rather than the browser's
// "Failed to fetch".
async function fetchFromCollector(path) {
  try {
    return await fetch(path, { headers: headers(), cache: "no-store", credentials: "omit" });
  } catch (error) {
    if (!(error instanceof TypeError)) throw error;  // (an abort is not the collector's doing)
    throw new Error(`cannot reach the collector at ${location.host}: is it running?`);
  }
}

// GET a path of the collector; a 401 asks for the token and tries again. Returns the Response (ok) or throws.
export async function get(path) {
  for (;;) {
    const response = await fetchFromCollector(path);
    if (response.status === 401) {
      await askForToken(Boolean(token()));
      continue;
    }
    if (!response.ok) {
      const text = (await response.text()).trim();
      throw new Error(`${path.split("?")[0]}: ${response.status} ${text}`);
    }
    return response;
  }
}

export async function getJSON(path) {
  return (await get(path)).json();
}
