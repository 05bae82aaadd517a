-- Health of an Argo CD Application as the app-of-apps over a tenant repository's argocd/ folder
-- sees it (argocd-cm: resource.customizations.health.argoproj.io_Application). Argo CD has no
-- health check for Applications of its own (dropped in 1.8), so without one an app-of-apps moves
-- to the next sync wave as soon as a child Application object exists, and the jobs (wave 0)
-- sync before the add-ons (wave -1) have installed the CRDs, the policy data and the webhook.
--
-- A child counts as healthy once it is in sync with git and its last sync succeeded: the
-- add-ons' own sync waves already wait for the CRDs to be established and the webhook to be
-- available. The workloads' readiness (a VM loading its model) stays on the child itself, so a
-- job that is slow to serve does not hold the app-of-apps' sync open. A child whose sync failed
-- with no retry left is Degraded, which fails the app-of-apps' sync instead of leaving it waiting.
hs = {}
hs.status = "Progressing"
hs.message = "waiting for the Application to be synced"
if obj.status == nil then
  return hs
end
local op = obj.status.operationState
if op ~= nil and op.phase == "Succeeded" and obj.status.sync ~= nil and obj.status.sync.status == "Synced" then
  hs.status = "Healthy"
  hs.message = "synced"
elseif op ~= nil and (op.phase == "Failed" or op.phase == "Error") then
  hs.message = op.message or op.phase
  local limit = 0
  if obj.spec.syncPolicy ~= nil and obj.spec.syncPolicy.retry ~= nil and obj.spec.syncPolicy.retry.limit ~= nil then
    limit = obj.spec.syncPolicy.retry.limit
  end
  if (op.retryCount or 0) >= limit then
    hs.status = "Degraded"
  end
end
return hs
