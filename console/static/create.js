// Create a job: the GPU count follows the model and node type picked (the model master's
// per-replica count, with why), and the models table filters as you type. The server derives
// and checks the same, and shows its refusal by field.
"use strict";
(() => {
  const form = document.getElementById("create-job");
  if (!form) return;
  const models = JSON.parse(form.dataset.models || "{}");
  const byModel = new Map((models.Models || []).map((m) => [m.Model, m]));
  const model = document.getElementById("model");
  const nodeType = document.getElementById("nodeType");
  const gpus = document.getElementById("gpuCount");
  const why = document.getElementById("gpu-why");

  function update() {
    const m = byModel.get(model.value.trim());
    if (!m) {
      gpus.value = "";
      why.textContent = model.value.trim() === "" ? "Pick a model: the GPU count follows from it and the node type." :
        "This tenant may not run that model (or no such model): pick one from the list.";
      model.setCustomValidity(model.value.trim() === "" ? "" : "Pick a model from the list.");
      return;
    }
    model.setCustomValidity("");
    const choice = (m.Choices || []).find((c) => !nodeType.value || c.NodeType === nodeType.value);
    if (!choice) {
      gpus.value = "";
      why.textContent = m.Model + " does not run on " + nodeType.value + " for this tenant.";
      nodeType.setCustomValidity("The model does not run on this node type.");
      return;
    }
    nodeType.setCustomValidity("");
    gpus.value = String(choice.GPUsPerReplica);
    why.textContent = choice.GPUsPerReplica + " GPU" + (choice.GPUsPerReplica === 1 ? "" : "s") + " per replica on " +
      choice.NodeType + " (" + choice.NodesPerReplica + " node" + (choice.NodesPerReplica === 1 ? "" : "s") + "): " + choice.Why;
  }
  model.addEventListener("input", update);
  nodeType.addEventListener("change", update);
  if (model.value) update();

  const filter = document.getElementById("model-filter");
  const rows = document.querySelectorAll("#models-table tbody tr");
  filter.addEventListener("input", () => {
    const q = filter.value.trim().toLowerCase();
    for (const row of rows) row.hidden = q !== "" && !row.dataset.model.toLowerCase().includes(q);
  });
})();
