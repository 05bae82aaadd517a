// The console's behaviour on every page. Small on purpose: pages work without it (forms post,
// links navigate); it adds the copy buttons.
"use strict";
document.addEventListener("click", async (event) => {
  const button = event.target.closest("button[data-copy]");
  if (!button) return;
  const source = document.getElementById(button.dataset.copy);
  const status = document.querySelector(".copy-status");
  try {
    await navigator.clipboard.writeText(source.textContent.trim());
    if (status) status.textContent = "Copied.";
  } catch (err) {
    // Without the clipboard (an insecure context, a refused permission): select the text so
    // that the user can copy it.
    const range = document.createRange();
    range.selectNodeContents(source);
    const sel = window.getSelection();
    sel.removeAllRanges();
    sel.addRange(range);
    if (status) status.textContent = "Selected: press Ctrl+C (or Cmd+C) to copy.";
  }
});
