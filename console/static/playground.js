// Playground: chat streamed token by token, and transcribe an uploaded file, through the
// console's relay to the endpoint (the key goes along with each request and is kept nowhere).
"use strict";
(() => {
  const root = document.getElementById("playground");
  if (!root) return;
  const csrf = document.querySelector('meta[name="csrf-token"]').content;
  const endpoint = document.getElementById("pg-endpoint");
  const key = document.getElementById("pg-key");
  const error = document.getElementById("pg-error");
  const base = () => "/t/" + encodeURIComponent(root.dataset.tenant) + "/playground/" + encodeURIComponent(endpoint.value);

  function fail(text) {
    error.textContent = text;
    error.hidden = false;
  }

  document.getElementById("pg-chat").addEventListener("submit", async (event) => {
    event.preventDefault();
    error.hidden = true;
    const out = document.getElementById("pg-reply");
    out.textContent = "";
    const resp = await fetch(base() + "/chat", {
      method: "POST",
      headers: { "Content-Type": "application/json", "X-CSRF-Token": csrf },
      body: JSON.stringify({ key: key.value, messages: [{ role: "user", content: document.getElementById("pg-prompt").value }] }),
    });
    if (!resp.ok) return fail("The endpoint answered " + resp.status + ": " + (await resp.text()));
    // The endpoint's server-sent events: one JSON chunk per data line, [DONE] at the end.
    const reader = resp.body.getReader();
    const decoder = new TextDecoder();
    let buffer = "";
    for (;;) {
      const { done, value } = await reader.read();
      if (done) break;
      buffer += decoder.decode(value, { stream: true });
      const lines = buffer.split("\n");
      buffer = lines.pop();
      for (const line of lines) {
        if (!line.startsWith("data: ") || line === "data: [DONE]") continue;
        const delta = JSON.parse(line.slice(6)).choices?.[0]?.delta?.content;
        if (delta) out.textContent += delta;
      }
    }
  });

  document.getElementById("pg-transcribe").addEventListener("submit", async (event) => {
    event.preventDefault();
    error.hidden = true;
    const out = document.getElementById("pg-text");
    out.textContent = "";
    const body = new FormData();
    body.append("key", key.value);
    body.append("file", document.getElementById("pg-file").files[0]);
    const resp = await fetch(base() + "/transcribe", { method: "POST", headers: { "X-CSRF-Token": csrf }, body: body });
    const text = await resp.text();
    if (!resp.ok) return fail("The endpoint answered " + resp.status + ": " + text);
    try {
      out.textContent = JSON.parse(text).text;
    } catch {
      out.textContent = text;
    }
  });
})();
