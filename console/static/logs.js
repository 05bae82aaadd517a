// The job page's log pane: follows the job's log (server-sent events, one JSON line each) and
// shows each line as text, newest at the bottom, at most data-max lines in the page. Pause
// stops showing (the stream goes on; what comes meanwhile is kept, up to data-max, and shown
// on resume); a replica, node or search narrows the stream (a new one).
"use strict";
(() => {
  const pane = document.getElementById("log-pane");
  if (!pane) return;
  const list = document.getElementById("log-lines");
  const status = document.getElementById("log-status");
  const pause = document.getElementById("log-pause");
  const replica = document.getElementById("log-replica");
  const node = document.getElementById("log-node");
  const search = document.getElementById("log-search");
  const max = Number(pane.dataset.max) || 1000;
  let source = null;
  let paused = false;
  let held = [];
  let dropped = 0;
  let pending = [];

  function streamURL() {
    const u = new URL(pane.dataset.events, location.href);
    if (replica.value) u.searchParams.set("replica", replica.value);
    if (node && node.value) u.searchParams.set("node", node.value);
    if (search.value) u.searchParams.set("search", search.value);
    return u;
  }

  function row(e) {
    const li = document.createElement("li");
    li.className = "log-" + e.kind + (e.stream ? " log-" + e.stream : "");
    const time = document.createElement("time");
    time.dateTime = e.time;
    time.textContent = new Date(e.time).toLocaleTimeString();
    const who = document.createElement("span");
    who.className = "log-who";
    who.textContent = e.vm ? "r" + e.replica + "/n" + e.node : "job";
    const text = document.createElement("span");
    text.className = "log-text";
    text.textContent = e.kind === "line" ? e.line : e.message;
    li.append(time, " ", who, " ", text);
    return li;
  }

  function show(entries) {
    if (entries.length === 0) return;
    const stick = list.scrollHeight - list.scrollTop - list.clientHeight < 32;
    const frag = document.createDocumentFragment();
    for (const e of entries.slice(-max)) frag.append(row(e));
    list.append(frag);
    while (list.childElementCount > max) list.firstElementChild.remove();
    if (stick) list.scrollTop = list.scrollHeight;
  }

  function flush() {
    const p = pending;
    pending = [];
    show(p);
  }

  // Lines may come faster than the page can draw them: they are drawn in batches, and only
  // the last max of a batch at all.
  function take(e) {
    if (paused) {
      held.push(e);
      if (held.length > max) {
        held.shift();
        dropped++;
      }
      status.textContent = "Paused: " + (held.length + dropped) + " new lines held.";
      return;
    }
    pending.push(e);
    if (pending.length > max) pending.shift();
    if (pending.length === 1) setTimeout(flush, 50);
  }

  function following() {
    status.textContent = paused ? "Paused." : "Following: new lines appear at the bottom.";
  }

  function connect() {
    if (source) source.close();
    list.replaceChildren();
    held = [];
    pending = [];
    dropped = 0;
    source = new EventSource(streamURL());
    source.onmessage = (ev) => take(JSON.parse(ev.data));
    source.onopen = following;
    source.onerror = () => {
      if (source.readyState !== EventSource.CLOSED) status.textContent = "Reconnecting…";
    };
    source.addEventListener("problem", (ev) => {
      source.close();
      status.textContent = ev.data;
    });
  }

  pause.addEventListener("click", () => {
    paused = !paused;
    pause.setAttribute("aria-pressed", String(paused));
    pause.textContent = paused ? "Resume" : "Pause";
    if (!paused) {
      const lost = dropped;
      show(held);
      held = [];
      dropped = 0;
      if (lost > 0) {
        show([{ kind: "notice", time: new Date().toISOString(), message: lost + " lines came while paused beyond the " + max + " kept; see inferplane jobs logs" }]);
      }
    }
    following();
  });
  replica.addEventListener("change", connect);
  if (node) node.addEventListener("change", connect);
  let typing = null;
  search.addEventListener("input", () => {
    clearTimeout(typing);
    typing = setTimeout(connect, 300);
  });
  document.getElementById("log-filters").addEventListener("submit", (ev) => {
    ev.preventDefault();
    connect();
  });
  connect();
})();
