-- Argo CD health of a LeaderElection (elector.dev). Paste it into the argocd-cm ConfigMap
-- under `resource.customizations.health.elector.dev_LeaderElection` (docs/operations.md,
-- "GitOps health"). It reads what the operator writes: observedGeneration, the phase and
-- the Ready and Stalled conditions.
local hs = {}
local status = obj.status
if status == nil or status.conditions == nil then
  hs.status = "Progressing"
  hs.message = "waiting for the operator to act on the election"
  return hs
end
local generation = obj.metadata and obj.metadata.generation
if generation ~= nil and status.observedGeneration ~= generation then
  hs.status = "Progressing"
  hs.message = "the operator has not acted on the latest spec yet"
  return hs
end
local ready, stalled
for _, condition in ipairs(status.conditions) do
  if condition.type == "Ready" then
    ready = condition
  elseif condition.type == "Stalled" then
    stalled = condition
  end
end
if stalled ~= nil and stalled.status == "True" then
  hs.status = "Degraded"
  hs.message = stalled.message
  return hs
end
if status.phase == "Paused" then
  hs.status = "Suspended"
  hs.message = "paused (spec.paused): nothing moves until it is resumed"
  return hs
end
if ready ~= nil and ready.status == "True" then
  hs.status = "Healthy"
  hs.message = ready.message
  return hs
end
hs.status = "Progressing"
if ready ~= nil then
  hs.message = ready.message
else
  hs.message = "waiting for the operator to act on the election"
end
return hs
