-- Health of a CustomResourceDefinition for Argo CD (argocd-cm:
-- resource.customizations.health.apiextensions.k8s.io_CustomResourceDefinition). The add-ons
-- apply inferplane's CRDs one sync wave before the Tenant and NodeTypes, so that wave must wait
-- until the CRDs are established. Argo CD 3.2's own check calls a CRD that is not established
-- yet Degraded, which fails the sync on its first look (argoproj/argo-cd#25084): this one waits
-- (Progressing) and calls a CRD Degraded only when the API server refuses it.
hs = {}
hs.status = "Progressing"
hs.message = "waiting for the API server to establish the CRD"
if obj.metadata.deletionTimestamp ~= nil then
  hs.message = "the CRD is being deleted"
  return hs
end
if obj.status == nil or obj.status.conditions == nil then
  return hs
end
for _, c in ipairs(obj.status.conditions) do
  if c.type == "NamesAccepted" and c.status == "False" then
    hs.status = "Degraded"
    hs.message = "names not accepted: " .. (c.message or "")
    return hs
  end
  if c.type == "NonStructuralSchema" and c.status == "True" then
    hs.status = "Degraded"
    hs.message = "schema not structural: " .. (c.message or "")
    return hs
  end
  if c.type == "Established" and c.status == "True" then
    hs.status = "Healthy"
    hs.message = "established"
  end
end
return hs
